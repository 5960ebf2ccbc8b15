"""A test that never ends: named from the live stream, classified the same on a free and a
busy machine, routed to whoever owns the loop, and the run ends within its stated bound.

Real pytest and real vitest 3 in the real sandbox; the busy machine is two real
`python -c 'while True: pass'` processes outside it for the run's duration.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devloop.core.models import RunResult
from devloop.roles.tester_tools import RunTestsInput, RunTestsTool
from devloop.runners import PytestRunner, VitestRunner
from devloop.runners.tamper import LOOP_IN_CODE
from devloop.sandbox import BwrapSandbox
from devloop.sandbox.process import STARVED_FACTOR

# The time bounds hold against the test's own busy loops, not other tests' fleets besides.
alone = pytest.mark.alone
MakeView = Callable[[str], Path]
LIMIT_S = 3.0
# Start-up, coverage and teardown beyond the kill: what the tool's help allows for.
SLACK_S = 20.0
PY_UNIT, JS_UNIT = "todo-py", "todo-be"
NOISE = "early noise from a passing test: ValueError"
PY_TESTS = f"""\
import sys
import todo


def test_early():
    print({NOISE!r}, file=sys.stderr)


def test_spins():
    {{body}}


def test_late():
    pass
"""
JS_TESTS = f"""\
import {{ test }} from 'vitest';
test('early', () => {{ console.error({NOISE!r}); }});
test('spins', () => {{ while (true) {{}} }});
test('late', () => {{}});
"""


@pytest.fixture(params=["idle", "two busy loops"])
def machine(request: pytest.FixtureRequest) -> Iterator[str]:
    """A free machine, or one where two CPU hogs outside the sandbox run throughout."""
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        if request.param != "idle":
            hogs = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)
            ]
        yield request.param
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(10)


def run(runner: PytestRunner | VitestRunner, view: Path, unit: str) -> tuple[RunResult, float]:
    started = time.monotonic()
    out = runner.run(
        view=view, unit_id=unit, run_id="run-1", attempt=1, retry_budget_left=3,
        timeout_s=LIMIT_S,
    )  # fmt: skip
    return out.result, time.monotonic() - started


def python_view(make_view: MakeView, body: str) -> Path:
    view = make_view(f"python/{PY_UNIT}")
    (view / f"units/{PY_UNIT}/tests/test_todo.py").write_text(PY_TESTS.format(body=body))
    return view


def a_named_loop(result: RunResult, took: float, test: str) -> str:
    """The invariants every killed endless loop holds; returns its reason."""
    reason = result.crash_reason or ""
    # Never starved: a run that burned its CPU was given it, however busy the machine.
    assert result.crashed and not result.starved and result.starved_reason is None, reason
    assert "endless loop" in reason
    # The hanging test is named from the live stream ...
    assert f"the test running was {test}" in reason
    # ... and what earlier, passing tests printed is not quoted as its last output.
    assert "early noise" not in reason
    assert result.cpu_s is not None and result.wall_s is not None
    assert result.cpu_s >= 0.5 * LIMIT_S
    # The bound run_tests' help states: STARVED_FACTOR x the limit, plus start-up.
    assert took < LIMIT_S * STARVED_FACTOR + SLACK_S
    return reason


@alone
@pytest.mark.timeout(120)
def test_a_python_endless_loop_in_a_test_is_named_and_goes_to_the_tester(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView, machine: str
) -> None:
    view = python_view(make_view, "while True:\n        pass")
    result, took = run(PytestRunner(sandbox, python_toolchain_dir), view, PY_UNIT)
    reason = a_named_loop(result, took, "tests/test_todo.py::test_spins")
    # The loop is in tests/ (faulthandler's dump says where): the tester's to fix.
    # faulthandler catches the loop on its `while` or its `pass` line.
    assert re.search(r"at tests/test_todo\.py:(10|11) in test_spins", reason), reason
    assert reason.startswith(f"pytest was killed at its {LIMIT_S:g} s ")  # its CPU limit
    assert not reason.startswith(LOOP_IN_CODE) and result.next_action == "retry_tester"


@alone
@pytest.mark.timeout(120)
def test_a_python_endless_loop_in_the_code_goes_to_the_coder(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = python_view(make_view, "todo.spin()")
    code = view / f"units/{PY_UNIT}/code/todo.py"
    code.write_text(code.read_text() + "\n\ndef spin() -> None:\n    while True:\n        pass\n")
    line = len(code.read_text().splitlines()) - 1
    result, took = run(PytestRunner(sandbox, python_toolchain_dir), view, PY_UNIT)
    reason = a_named_loop(result, took, "tests/test_todo.py::test_spins")
    assert reason.startswith(LOOP_IN_CODE)
    assert re.search(rf"at code/todo\.py:({line}|{line + 1}) in spin", reason), reason
    assert result.next_action == "retry_coder"


@alone
@pytest.mark.timeout(120)
def test_a_vitest_endless_loop_is_named_and_goes_to_the_tester(
    sandbox: BwrapSandbox, node_toolchain_dir: Path, make_view: MakeView, machine: str
) -> None:
    view = make_view(f"node/{JS_UNIT}")
    for old in (view / f"units/{JS_UNIT}/tests").iterdir():
        old.unlink()
    (view / f"units/{JS_UNIT}/tests/loop.test.js").write_text(JS_TESTS)
    runner = VitestRunner(sandbox, node_toolchain_dir / "node_modules")
    result, took = run(runner, view, JS_UNIT)
    reason = a_named_loop(result, took, "tests/loop.test.js::spins")
    # A node loop leaves no frame behind: the tester reads the named test first.
    assert not reason.startswith(LOOP_IN_CODE) and result.next_action == "retry_tester"


def test_run_tests_states_the_bound_it_keeps() -> None:
    field = RunTestsInput.model_fields["timeout_s"].description or ""
    help_text = RunTestsTool.description + " " + field
    assert f"{STARVED_FACTOR:g}" in help_text or "three times" in help_text
    assert "whole run" not in field  # the limit is on time given, not the wall clock
