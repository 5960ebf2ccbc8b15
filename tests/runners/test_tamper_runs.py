"""Code under test that tampers with the test framework, under real pytest and vitest in the
real sandbox: refused before the run when the source shows it, caught by the plugin or the
reporter when it does not, and in both cases a crash for the coder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from devloop.core.models import RunResult
from devloop.runners import PytestRunner, VitestRunner
from devloop.runners.tamper import REFUSED, TAMPERED
from devloop.sandbox import BwrapSandbox
from tests.runners.test_tamper import NINE_LINES

RUN = "run-1"
MakeView = Callable[[str], Path]  # the make_view fixture (conftest.py)
# The nine lines again, in a form the static check cannot see (names built at run time).
HIDDEN_NINE_LINES = """\
import importlib
reports = importlib.import_module("_py" + "test.reports")
cls = getattr(reports, "Test" + "Report")
_init = cls.__init__
def _green(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if self.outcome == "failed":
        self.outcome = "passed"
cls.__init__ = _green
"""
# A module that makes every `toBe` pass, reaching the worker's expect through a global
# object it never names.
PATCHED_EXPECT = """\
const g = new Function('return this')();
const e = g['exp' + 'ect'];
if (e) e.extend({ toBe: () => ({ pass: true, message: () => '' }) });
"""


@pytest.fixture(scope="module")
def pytest_runner(sandbox: BwrapSandbox, python_toolchain_dir: Path) -> PytestRunner:
    return PytestRunner(sandbox, python_toolchain_dir)


@pytest.fixture(scope="module")
def vitest_runner(sandbox: BwrapSandbox, node_toolchain_dir: Path) -> VitestRunner:
    return VitestRunner(sandbox, node_toolchain_dir / "node_modules")


def run(runner: PytestRunner | VitestRunner, view: Path, unit: str) -> RunResult:
    """Run attempt 1 of `unit`; the result.json written must be the result returned."""
    out = runner.run(view=view, unit_id=unit, run_id=RUN, attempt=1, retry_budget_left=3,
                     timeout_s=60.0)
    written = view / "units" / unit / "runs" / RUN / "result.json"
    assert RunResult.model_validate_json(written.read_text()) == out.result
    return out.result


def prepend(view: Path, rel: str, text: str) -> None:
    """Put `text` at the top of a file of the view."""
    path = view / rel
    path.write_text(text + path.read_text())


def refused_for_the_coder(result: RunResult, where: str) -> None:
    """Not run at all: a crash for the coder naming the file and line."""
    assert not result.ok and result.crashed and result.next_action == "retry_coder"
    assert result.crash_reason is not None
    assert result.crash_reason.startswith(f"{REFUSED}: {where}"), result.crash_reason
    assert result.summary.total == 0 and result.duration_ms == 0


def test_the_issues_nine_line_patch_is_refused_before_pytest_runs(
    pytest_runner: PytestRunner, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    prepend(view, "units/todo-py/code/todo.py", NINE_LINES)
    result = run(pytest_runner, view, "todo-py")
    refused_for_the_coder(result, "code/todo.py:1: imports _pytest.reports")
    assert not (view / "units/todo-py/runs/run-1/junit.xml").exists()  # pytest never ran


def test_the_nine_line_patch_the_source_hides_is_caught_while_pytest_runs(
    pytest_runner: PytestRunner, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    prepend(view, "units/todo-py/code/todo.py", HIDDEN_NINE_LINES)
    result = run(pytest_runner, view, "todo-py")
    assert result.summary.failed == 0 and result.summary.passed == 4  # the forgery worked
    assert not result.ok and result.crashed and result.next_action == "retry_coder"
    assert result.crash_reason == f"{TAMPERED}: _pytest.reports.TestReport.__init__"


def test_a_sys_modules_write_is_refused(pytest_runner: PytestRunner, make_view: MakeView) -> None:
    view = make_view("python/todo-py")
    prepend(view, "units/todo-py/code/todo.py", "import sys\nsys.modules['json'] = None\n")
    result = run(pytest_runner, view, "todo-py")
    refused_for_the_coder(result, "code/todo.py:2: uses sys.modules")


def test_an_exit_at_interpreter_exit_is_refused(
    pytest_runner: PytestRunner, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    exits = "import atexit, os\natexit.register(lambda: os._exit(0))\n"
    prepend(view, "units/todo-py/code/todo.py", exits)
    result = run(pytest_runner, view, "todo-py")
    refused_for_the_coder(result, "code/todo.py:1: imports atexit")
    assert "code/todo.py:2: uses os._exit" in str(result.crash_reason)


def test_a_process_exit_in_node_code_is_refused(
    vitest_runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    prepend(view, "units/todo-be/code/server.js", "process.on('exit', () => process.exit(0));\n")
    result = run(vitest_runner, view, "todo-be")
    refused_for_the_coder(result, "code/server.js:1: ")
    reason = str(result.crash_reason)
    assert "`process.exit`" in reason and "throw an Error" in reason


def test_node_code_that_patches_the_workers_expect_is_caught(
    vitest_runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    prepend(view, "units/todo-be/code/server.js", PATCHED_EXPECT)
    result = run(vitest_runner, view, "todo-be")
    assert not result.ok and result.crashed and result.next_action == "retry_coder"
    assert result.crash_reason is not None
    assert result.crash_reason.startswith(f"{TAMPERED}: expect(…).toBe"), result.crash_reason
    report = json.loads((view / "units/todo-be/runs/run-1/report.json").read_text())
    messages = [m for f in report["testResults"] for t in f["assertionResults"]
                for m in t["failureMessages"]]
    assert any(TAMPERED in m for m in messages)  # the guard also failed the test
