"""PytestRunner against real pytest in the real bubblewrap sandbox."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devloop.core.models import RunResult
from devloop.runners import PytestRunner, RunOutcome, is_useful_hint
from devloop.runners.pytest import extract_expected_got
from devloop.runners.tamper import is_code_fault
from devloop.sandbox import BwrapSandbox
from tests.plant import plant_pyc

RUN = "run-1"
MakeView = Callable[[str], Path]  # the make_view fixture (conftest.py)
UNIT = "todo-py"


@pytest.fixture(scope="module")
def runner(sandbox: BwrapSandbox, python_toolchain_dir: Path) -> PytestRunner:
    """The runner over the machine's python test venv."""
    return PytestRunner(sandbox, python_toolchain_dir)


def run(runner: PytestRunner, view: Path, timeout_s: float = 60.0) -> RunOutcome:
    """Run attempt 2 of the unit with three retries left."""
    return runner.run(
        view=view, unit_id=UNIT, run_id=RUN, attempt=2, retry_budget_left=3, timeout_s=timeout_s
    )


def told(out: RunOutcome) -> str:
    """All a run left, for an assertion that fails on it."""
    return (f"exit {out.exit_code}, timed out {out.timed_out}\n{out.result.model_dump_json()}\n"
            f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}")


def written(view: Path) -> RunResult:
    """The result.json the runner wrote, checked next to stdout.txt and stderr.txt."""
    run_dir = view / "units" / UNIT / "runs" / RUN
    assert (run_dir / "stdout.txt").is_file() and (run_dir / "stderr.txt").is_file()
    return RunResult.model_validate_json((run_dir / "result.json").read_text())


def test_none_and_missing_keys_become_failures_with_hints(
    runner: PytestRunner, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    result = run(runner, view).result
    assert (result.ok, result.crashed, result.next_action) == (False, False, "retry_coder")
    assert result.summary.model_dump() == {"total": 4, "passed": 1, "failed": 3, "skipped": 0}
    failures = {f.test.split("::")[1]: f for f in result.failures}
    assert set(failures) == {
        "test_create_without_title_is_rejected",
        "test_rename_without_title_keeps_the_old_one",
        "test_missing_title_answers_400",
    }
    none = failures["test_create_without_title_is_rejected"]
    assert none.test == "tests/test_todo.py::test_create_without_title_is_rejected"
    assert "'NoneType' object has no attribute 'strip'" in none.stack
    assert "`title` is None when `.strip` is used at code/todo.py:7" in none.hint
    key = failures["test_rename_without_title_keeps_the_old_one"]
    assert "`payload['title']` raised KeyError" in key.hint and ".get('title')" in key.hint
    status = failures["test_missing_title_answers_400"]
    assert (status.expected, status.got) == (400, 500)
    assert "400" in status.hint and "500" in status.hint
    assert all(is_useful_hint(f.hint) for f in result.failures)
    assert result.attempt == 2 and result.retry_budget_left == 3
    assert written(view) == result
    # result.json says where the time went.
    assert result.wall_s is not None and result.wall_s > 0 and result.cpu_s is not None
    assert 0 < result.cpu_s < 60 and result.wait_s is not None and result.wait_s >= 0


def test_the_fixed_code_passes(runner: PytestRunner, make_view: MakeView, fixtures: Path) -> None:
    view = make_view("python/todo-py")
    shutil.copy(fixtures / "fixes/todo.py", view / "units/todo-py/code/todo.py")
    out = run(runner, view)
    assert (out.result.ok, out.result.next_action, out.result.failures) == (True, "none", [])
    assert out.result.summary.passed == 4 and "4 passed" in out.stdout
    assert written(view) == out.result
    # PYTHONDONTWRITEBYTECODE and no cache provider: nothing but the run dir changed.
    assert not list((view / "units/todo-py").rglob("__pycache__"))
    assert not (view / "units/todo-py/.pytest_cache").exists()


@pytest.mark.timeout(120)
def test_a_planted_unchecked_pyc_never_runs_instead_of_the_reviewed_source(
    runner: PytestRunner, make_view: MakeView, python_toolchain_dir: Path
) -> None:
    # Issue 26, item 9: a `.pyc` compiled from other source, with an unchecked hash, sat in
    # code/__pycache__ and ran instead of the reviewed money.py. Bytecode caches are now
    # read and written only under the sandbox's private /tmp (PYTHONPYCACHEPREFIX).
    view = make_view("python/cents")
    code = view / "units/cents/code"
    planted = plant_pyc(code, python_toolchain_dir / "bin/python")
    out = runner.run(view=view, unit_id="cents", run_id=RUN, attempt=1, retry_budget_left=4)
    assert (out.result.ok, out.result.summary.passed) == (True, 1), told(out)
    assert planted.read_bytes()[4:8] == b"\x01\0\0\0"  # still there, still unchecked-hash
    assert {p.name for p in code.rglob("*")} == {"__pycache__", "money.py", planted.name}


def test_an_import_error_raised_in_code_at_collection_is_a_crash_for_the_coder(
    runner: PytestRunner, make_view: MakeView
) -> None:
    # Issue 29: the innermost frame is in code/, so no change to the tests can mend it.
    view = make_view("python/todo-py")
    todo = view / "units/todo-py/code/todo.py"
    todo.write_text("import missing_mod\n" + todo.read_text())
    result = run(runner, view).result
    assert (result.ok, result.crashed, result.next_action) == (False, True, "retry_coder")
    assert result.crash_reason == (
        "the code under test raised while the tests loaded it (at code/todo.py:1): "
        "pytest could not import tests/test_todo.py: ModuleNotFoundError: "
        "No module named 'missing_mod' (at code/todo.py:1)"
    )
    assert is_code_fault(result.crash_reason)
    assert result.stdout_tail and "missing_mod" in result.stdout_tail
    assert written(view) == result


def test_a_suite_without_tests_is_a_crash(runner: PytestRunner, make_view: MakeView) -> None:
    view = make_view("python/todo-py")
    (view / "units/todo-py/tests/test_todo.py").write_text("import todo\n")
    result = run(runner, view).result
    assert result.crashed and not result.ok and result.next_action == "retry_tester"
    assert result.crash_reason is not None and "collected no tests" in result.crash_reason


def test_a_missing_tests_dir_is_a_crash_quoting_pytest(
    runner: PytestRunner, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    shutil.rmtree(view / "units/todo-py/tests")
    result = run(runner, view).result
    assert result.crashed and result.next_action == "retry_tester"
    assert result.crash_reason is not None
    assert result.crash_reason.startswith(
        "pytest could not start (usage error): ERROR: file or directory not found: tests"
    )


def test_a_hanging_test_is_killed_at_the_limit(runner: PytestRunner, make_view: MakeView) -> None:
    view = make_view("python/todo-py")
    (view / "units/todo-py/tests/test_todo.py").write_text(
        "import time\n\ndef test_sleeps():\n    time.sleep(600)\n"
    )
    started = time.monotonic()
    out = run(runner, view, timeout_s=2)
    assert time.monotonic() - started < 2 + 30  # the limit, plus slack for a loaded machine
    assert out.timed_out and out.result.crashed
    assert out.result.crash_reason is not None and "2 s limit" in out.result.crash_reason


def test_setup_errors_count_as_failures(runner: PytestRunner, make_view: MakeView) -> None:
    view = make_view("python/todo-py")
    (view / "units/todo-py/tests/test_todo.py").write_text(
        "import pytest\nfrom todo import create\n\n"
        "@pytest.fixture\ndef store():\n    return create([], {})\n\n"
        "def test_uses_store(store):\n    assert store\n"
    )
    result = run(runner, view).result
    assert not result.crashed and result.summary.failed == 1
    [failure] = result.failures
    assert "failed on setup" in failure.stack and "`.strip`" in failure.hint


def test_a_symlink_planted_at_result_json_is_replaced_not_followed(
    runner: PytestRunner, make_view: MakeView, fixtures: Path
) -> None:
    view = make_view("python/todo-py")
    shutil.copy(fixtures / "fixes/todo.py", view / "units/todo-py/code/todo.py")
    (view / "units/todo-py/tests/test_plant.py").write_text(
        "import os\n\ndef test_plant():\n"
        "    os.symlink('../../code/todo.py', 'runs/run-1/result.json')\n"
    )
    before = (view / "units/todo-py/code/todo.py").read_text()
    result = run(runner, view).result
    assert result.ok, result.crash_reason  # (seen crashed once, on 4 xdist workers)
    assert (view / "units/todo-py/code/todo.py").read_text() == before
    assert not (view / "units/todo-py/runs/run-1/result.json").is_symlink()


VARIED_SUITE = """\
import pytest

@pytest.mark.parametrize("n", [1, 2, "a.b"])
def test_param(n):
    assert n

@pytest.mark.skip(reason="no")
def test_skipped():
    assert False

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="lucky")
def test_xpass():
    assert True

class TestGroup:
    class TestInner:
        def test_deep(self):
            assert True

    def test_method(self):
        assert True
"""


def test_a_varied_passing_suite_is_green_on_every_account(
    runner: PytestRunner, make_view: MakeView, fixtures: Path
) -> None:
    # Parameters, nested classes, skips, xfail, xpass and a module skipped whole: the
    # channel, the exit status and junit.xml must agree on all of them.
    view = make_view("python/todo-py")
    shutil.copy(fixtures / "fixes/todo.py", view / "units/todo-py/code/todo.py")
    (view / "units/todo-py/tests/test_varied.py").write_text(VARIED_SUITE)
    (view / "units/todo-py/tests/test_skipped_module.py").write_text(
        "import pytest\npytest.skip('not here', allow_module_level=True)\n"
    )
    out = run(runner, view)
    assert out.exit_code == 0 and out.result.ok, out.result.crash_reason
    assert out.result.summary.model_dump() == {
        "total": 13, "passed": 10, "failed": 0, "skipped": 3
    }
    # Inside those counts: the xpass among the passed, the xfail among the skipped.
    assert out.result.statuses is not None
    assert out.result.statuses.model_dump() == {"errors": 0, "xfailed": 1, "xpassed": 1, "todo": 0}


# --- the verdict nobody can forge ----------------------------------------------------

GREEN_JUNIT = (
    '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
    'failures="0" skipped="0" tests="4">'
    + "".join(
        f'<testcase classname="tests.test_todo" name="{name}" file="tests/test_todo.py" '
        'time="0.001" />'
        for name in (
            "test_create_strips_the_title",
            "test_create_without_title_is_rejected",
            "test_rename_without_title_keeps_the_old_one",
            "test_missing_title_answers_400",
        )
    )
    + "</testsuite></testsuites>"
)


# How the verdict tests below reach atexit: a name built at run time, which the static
# tamper check cannot see (tests/runners/test_tamper.py covers the forms it refuses).
HIDDEN_ATEXIT = "atexit = importlib.import_module('ate' + 'xit')\n"


def test_code_that_rewrites_the_junit_report_at_exit_is_a_crash_not_a_pass(
    runner: PytestRunner, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    todo = view / "units/todo-py/code/todo.py"
    # The code under test rewrites the report to "all passed" once pytest is done.
    todo.write_text(
        f"import importlib, pathlib\nGREEN = {GREEN_JUNIT!r}\n{HIDDEN_ATEXIT}"
        "atexit.register(lambda: pathlib.Path('runs/run-1/junit.xml').write_text(GREEN))\n"
        + todo.read_text()
    )
    out = run(runner, view)
    assert out.exit_code == 1 and "3 failed" in out.stdout  # pytest itself said red
    junit = (view / "units/todo-py/runs/run-1/junit.xml").read_text()
    assert junit == GREEN_JUNIT  # the forgery happened
    result = out.result
    assert not result.ok and result.crashed and result.next_action == "retry_tester"
    assert result.crash_reason is not None
    assert result.crash_reason.startswith("report and exit status disagree: the report file says")
    assert written(view) == result


def test_code_that_exits_zero_after_failing_tests_is_a_crash_not_a_pass(
    runner: PytestRunner, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    todo = view / "units/todo-py/code/todo.py"
    todo.write_text(
        f"import importlib, os, pathlib\nGREEN = {GREEN_JUNIT!r}\n{HIDDEN_ATEXIT}"
        "def _forge():\n"
        "    pathlib.Path('runs/run-1/junit.xml').write_text(GREEN)\n"
        "    getattr(os, '_' + 'exit')(0)\n"
        "atexit.register(_forge)\n" + todo.read_text()
    )
    out = run(runner, view)
    assert out.exit_code == 0 and "3 failed" in out.stdout
    result = out.result
    assert not result.ok and result.crashed
    assert result.crash_reason == (
        "report and exit status disagree: the runner's final record says status 1, "
        "but it exited with status 0"
    )


FORGED_LINES = {
    # The failing tests "pass" first; the real records then report them a second time.
    "duplicates": "".join(
        f'{{"e": "phase", "id": "tests/test_todo.py::{t}", "when": "{w}", "outcome": "passed"}}\n'
        for t in ("test_create_without_title_is_rejected", "test_missing_title_answers_400",
                  "test_rename_without_title_keeps_the_old_one")
        for w in ("setup", "call", "teardown")
    ),
    # A second count and a second final record saying all is well.
    "extra records": '{"e": "collected", "n": 1}\n{"e": "end", "status": 0}\n',
    # Tests nobody collected, passing.
    "extra tests": "".join(
        f'{{"e": "phase", "id": "tests/test_x.py::t{i}", "when": "{w}", "outcome": "passed"}}\n'
        for i in range(3)
        for w in ("setup", "call", "teardown")
    ),
    # Garbage, and a line cut in half.
    "garbage": 'not json\n{"e": "end", "sta',
}


@pytest.mark.parametrize("forgery", sorted(FORGED_LINES))
def test_lines_the_code_writes_into_the_channel_cannot_turn_a_red_run_green(
    runner: PytestRunner, make_view: MakeView, forgery: str
) -> None:
    view = make_view("python/todo-py")
    todo = view / "units/todo-py/code/todo.py"
    # The channel's fd is open in the test process: the code under test writes to it.
    todo.write_text(
        "import os\n"
        f"os.write(int(os.environ['VERDICT' + '_FD']), {FORGED_LINES[forgery]!r}.encode())\n"
        + todo.read_text()
    )
    result = run(runner, view).result
    assert not result.ok and result.crashed and result.next_action == "retry_tester"
    assert result.crash_reason is not None
    assert result.crash_reason.startswith("report and exit status disagree: ")


def test_a_failed_assertion_shows_itself_its_values_and_the_code_it_calls(
    runner: PytestRunner, make_view: MakeView
) -> None:
    view = make_view("python/money")
    result = runner.run(view=view, unit_id="money", run_id=RUN, attempt=1,
                        retry_budget_left=4).result
    failures = {f.test.split("::")[1]: f for f in result.failures}
    none = failures["test_money_of_nothing_is_none"]
    assert none.expected == "None" and str(none.got).startswith("<money.Money object at ")
    assert none.hint.startswith(
        "`assert money.Money(None, None) is None` failed at tests/test_money.py:5: "
        "got <money.Money object at "
    )
    assert none.hint.endswith(
        "where None was expected (from `money.Money(None, None)`). The test calls `Money` at "
        "code/money.py:4 (`class Money:`): trace the value from there."
    )
    cents = failures["test_parse_reads_cents"]
    assert (cents.expected, cents.got) == (1251, 1250)
    assert "got 1250 where 1251 was expected (from `value.cents`)" in cents.hint
    assert "`parse` at code/money.py:12 (`def parse(text):`)" in cents.hint
    both = failures["test_both_amounts_are_set"]
    assert (both.expected, both.got) == (None, None)
    assert "pytest evaluated it as `assert (100 is not None and 1 is None)`" in both.hint
    for failure in result.failures:
        assert "def test_" not in failure.hint and "expected None, got None" not in failure.hint
        assert is_useful_hint(failure.hint), failure.hint


@pytest.mark.parametrize(
    ("message", "expected", "got"),
    [
        ("assert 500 == 400\n +  where 500 = <Response [500]>.status_code", 400, 500),
        ("assert 'a' == 'b'", "b", "a"),
        ("AssertionError: bad status\nassert 201 == 400", 400, 201),
        ("AssertionError: 500 != 400", 400, 500),
        ("assert <Todo 1> == None", None, "<Todo 1>"),
        ("KeyError: 'title'", None, None),
        ("AssertionError: assert <m.Money object at 0x1> is None\n +  where ...",
         "None", "<m.Money object at 0x1>"),
        ("assert None is not None", "not None", "None"),
        ("assert 'eur' in ['EUR', 'USD']", "in ['EUR', 'USD']", "eur"),
        ("assert 3 < 2", "< 2", 3),
        ("assert 0\n +  where 0 = f()", "a true value", 0),
        ("assert not [1]", "a false value", [1]),
        ("assert (1 is None and 2)", None, None),
    ],
)
def test_expected_and_got_come_from_pytest_messages(
    message: str, expected: object, got: object
) -> None:
    assert extract_expected_got(message) == (expected, got)
