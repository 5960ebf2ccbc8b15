"""A verdict plugin planted in the cache never runs: the copy is checked against the
package's bytes before each run (issue 26, item 1)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devloop.runners import PytestRunner
from devloop.runners.base import cache_dir_of
from devloop.runners.channel import HERE, PYTEST_PLUGIN, plugin_dir
from devloop.safe.safedir import Dir
from devloop.safe.safetree import remove_tree
from devloop.sandbox import BwrapSandbox

MakeView = Callable[[str], Path]
UNIT = "todo-py"
# The real plugin plus one hook: every failed report becomes a pass, so the channel, the
# junit file and pytest's exit status all agree on green.
HOOK = '''

import pytest as _pytest_for_the_hook


@_pytest_for_the_hook.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
'''


@pytest.fixture
def planted(python_toolchain_dir: Path) -> Iterator[Path]:
    """The cache's plugin copy, with the hook planted in it; the copy is removed after
    (the next run makes it again), whatever the test found."""
    copy = plugin_dir(cache_dir_of(python_toolchain_dir))
    plugin = copy / f"{PYTEST_PLUGIN}.py"
    copy.chmod(0o755)
    plugin.chmod(0o644)
    plugin.write_text((HERE / plugin.name).read_text() + HOOK)
    yield plugin
    with Dir.open(copy.parent) as parent:
        remove_tree(parent, copy.name)


# The plant and its repair are in the machine's one copy, which every test run binds: beside
# other tests, their runs lose the plugin mid-run (6 of 12 runs of another test failed so).
@pytest.mark.alone
@pytest.mark.timeout(180)
def test_a_planted_plugin_never_runs_so_a_truly_red_unit_stays_red(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView, planted: Path
) -> None:
    runner = PytestRunner(sandbox, python_toolchain_dir)
    view = make_view(f"python/{UNIT}")
    out = runner.run(view=view, unit_id=UNIT, run_id="run-1", attempt=1, retry_budget_left=4,
                     timeout_s=120)
    assert (out.result.ok, out.result.crashed) == (False, False), out.stdout
    assert out.result.summary.failed == 3 and out.result.next_action == "retry_coder"
    assert planted.read_bytes() == (HERE / planted.name).read_bytes()
    assert os.stat(planted).st_mode & 0o777 == 0o444
