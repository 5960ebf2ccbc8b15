"""A scripted green stays scripted: a folder passed under `--llm stub` says so in `status`,
and `devloop run` with a real provider (the stub server standing in for Claude) builds
those units again with the model instead of resuming them as passed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devloop.llm.stub import StubServer
from devloop.report.render import build_report
from tests.fleet.builder import UnitPlan, build, script
from tests.leftovers import views_of_killed_processes
from tests.workers.runproc import RunProcess, clean_env
from tests.workers.test_run_ends import devloop, rows

pytestmark = pytest.mark.timeout(600)
PLANS = [UnitPlan("core"), UnitPlan("api", ["core"])]
WHY = "passed under scripted turns (--llm stub); running it with the model from implement"


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    root = build(tmp_path / "p", PLANS)
    (root / "stub.yaml").write_text(yaml.safe_dump(script(PLANS)))
    with views_of_killed_processes():
        yield root


def test_a_stub_passed_folder_is_built_again_by_the_model_and_loses_its_mark(
    project: Path, python_toolchain_dir: Path
) -> None:
    stub_run = RunProcess(project, workers=2)
    try:
        assert stub_run.start().wait(300) == 0, stub_run.output()
    finally:
        stub_run.close()
    first = rows(project)
    assert {u: (r["status"], r["scripted"], r["attempt"]) for u, r in first.items()} == {
        "core": ("passed", True, 1), "api": ("passed", True, 1)}
    table = devloop("status", str(project), timeout=120).stdout
    assert table.count("│ passed (scripted) │") == 2, table
    assert "passed (scripted): 2 units passed under the stub's scripted turns" in table
    assert "(scripted)" in build_report(project)

    # A second stub run resumes them as passed: the script proves the same thing again.
    again = RunProcess(project, workers=1)
    again.runs = 1
    try:
        assert again.start().wait(300) == 0, again.output()
    finally:
        again.close()
    assert "resuming: 2 passed, 0 to go" in again.out.read_text()
    assert WHY not in again.output()

    # The user follows the README with a key: the model is asked, the units run again.
    with StubServer(script(PLANS)) as claude:
        env = clean_env(ANTHROPIC_BASE_URL=claude.base_url, ANTHROPIC_API_KEY="test")
        real = RunProcess(project, workers=2, env=env, llm="anthropic")
        real.runs = 2
        try:
            code = real.start().wait(300)
        finally:
            real.close()
        asked = {r.session_key for r in claude.requests}
    out = real.out.read_text()
    assert code == 0, real.output()
    assert {"coder.c-test.p-fleet.core", "coder.c-test.p-fleet.api",
            "tester.c-test.p-fleet.core", "tester.c-test.p-fleet.api"} <= asked
    assert "resuming: 0 passed, 2 to go" in out
    assert out.count(f"core: {WHY} as attempt 2\n") == 1, out
    assert out.count(f"api: {WHY} once core passes\n") == 1, out
    last = rows(project)
    assert {u: (r["status"], r["scripted"], r["attempt"]) for u, r in last.items()} == {
        "core": ("passed", False, 2), "api": ("passed", False, 2)}
    assert "(scripted)" not in devloop("status", str(project), timeout=120).stdout
    assert "(scripted)" not in build_report(project)
    log = (project / "units/core/coder.log").read_text()
    assert "attempt: 2" in log
