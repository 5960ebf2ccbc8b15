"""Every test status, and set-up faults told from code faults: real pytest and vitest 3
runs in the real sandbox (fixtures/python/statuses, fixtures/node/statuses)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.core.models import Failure, RunResult
from devloop.runners import PytestRunner, VitestRunner
from devloop.runners.pyassert import CUT_NOTE, VALUE_CAP, py_literal
from devloop.sandbox import BwrapSandbox, new_view_dir
from tests.runners.conftest import FIXTURES, MakeView

RUN = "run-1"
UNIT = "statuses"


def run_python(runner: PytestRunner, view: Path, unit: str = UNIT) -> RunResult:
    """One run of a python unit in the view; the result.json written is the one returned."""
    out = runner.run(view=view, unit_id=unit, run_id=RUN, attempt=1, retry_budget_left=3)
    written = (view / "units" / unit / "runs" / RUN / "result.json").read_text()
    assert RunResult.model_validate_json(written) == out.result
    return out.result


@pytest.fixture(scope="module")
def python(sandbox: BwrapSandbox, python_toolchain_dir: Path, settings: Settings
           ) -> Iterator[RunResult]:
    """fixtures/python/statuses run once: every pytest status and set-up fault in one suite."""
    view = new_view_dir(settings, prefix="runner-test-")
    shutil.copytree(FIXTURES / "python" / UNIT, view / "units" / UNIT)
    try:
        yield run_python(PytestRunner(sandbox, python_toolchain_dir), view)
    finally:
        shutil.rmtree(view, ignore_errors=True)


def failure(result: RunResult, name: str) -> Failure:
    """The failure of the test whose node id ends with `::name`."""
    [found] = [f for f in result.failures if f.test.endswith(f"::{name}")]
    return found


def outcome(result: RunResult, name: str) -> str:
    """The recorded outcome of the test whose node id ends with `::name`."""
    assert result.outcomes is not None
    [found] = [o for t, o in result.outcomes.items() if t.endswith(f"::{name}")]
    return found


# --- statuses ------------------------------------------------------------------------


def test_the_seed_summary_stays_and_the_finer_counts_sit_inside_it(python: RunResult) -> None:
    # 13 tests, each counted once: errors among the failed, the xpass among the passed,
    # the xfail among the skipped.
    assert not python.crashed, python.crash_reason
    assert python.summary.model_dump() == {"total": 13, "passed": 2, "failed": 9, "skipped": 2}
    assert python.statuses is not None
    assert python.statuses.model_dump() == {"errors": 4, "xfailed": 1, "xpassed": 1, "todo": 0}
    assert python.outcomes is not None and len(python.outcomes) == 13


def test_xfail_is_xfailed_and_a_non_strict_xpass_is_xpassed_neither_a_failure(
    python: RunResult,
) -> None:
    assert outcome(python, "test_xfail") == "xfailed"
    assert outcome(python, "test_xpass") == "xpassed"
    assert outcome(python, "test_skipped") == "skipped"
    named = {f.test.split("::")[-1] for f in python.failures}
    assert not named & {"test_xfail", "test_xpass", "test_skipped", "test_passes"}


def test_a_strict_xpass_is_a_failure_for_the_tester(python: RunResult) -> None:
    assert outcome(python, "test_xpass_strict") == "failed"
    strict = failure(python, "test_xpass_strict")
    assert strict.fault == "tests" and "xfail(strict=True) but passed" in strict.hint


def test_a_fixture_error_is_an_error_not_a_failure(python: RunResult) -> None:
    assert outcome(python, "test_fixture_raises") == "error"
    assert outcome(python, "test_passes_and_its_teardown_errors") == "error"
    assert outcome(python, "test_imports_a_missing_package") == "failed"  # the test body raised


def test_a_failed_test_whose_teardown_errors_is_counted_once_with_the_error_attached(
    python: RunResult,
) -> None:
    assert outcome(python, "test_fails_and_its_teardown_errors") == "failed"
    named = [f.test for f in python.failures if f.test.endswith("_fails_and_its_teardown_errors")]
    assert len(named) == 1
    both = failure(python, "test_fails_and_its_teardown_errors")
    assert (both.expected, both.got) == (2, 1)
    assert "assert 1 == 2" in both.stack and "failed on teardown" in both.stack
    assert both.stack.index("assert 1 == 2") < both.stack.index("teardown broke")
    assert both.hint.startswith("`assert bad_teardown == 2` failed")
    assert "teardown failed too" in both.hint


# --- set-up faults go to the tester --------------------------------------------------


def test_a_set_up_fault_sends_the_run_to_the_tester(python: RunResult) -> None:
    assert (python.ok, python.crashed, python.next_action) == (False, False, "retry_tester")


def test_a_missing_plugin_fixture_is_the_tester_s_naming_it_and_what_the_sandbox_offers(
    python: RunResult,
) -> None:
    mocker = failure(python, "test_wants_mocker")
    assert mocker.fault == "tests"
    assert "fixture `mocker`" in mocker.hint
    assert "pytest-mock, which is not installed" in mocker.hint
    assert "pytest 8.4.2, coverage 7.10.7 (toolchains/python/requirements.txt)" in mocker.hint
    assert "make the code handle" not in mocker.hint


def test_an_import_of_a_package_the_sandbox_lacks_from_tests_is_the_tester_s(
    python: RunResult,
) -> None:
    missing = failure(python, "test_imports_a_missing_package")
    assert missing.fault == "tests"
    assert missing.hint.startswith(
        "`tests/test_setup.py::test_imports_a_missing_package` imports `requests` at "
        "tests/test_setup.py:17, but the sandbox has no package `requests`: it offers the "
        "standard library, pytest 8.4.2, coverage 7.10.7"
    )


def test_a_fixture_that_raises_by_itself_is_the_tester_s_naming_the_fixture(
    python: RunResult,
) -> None:
    broken = failure(python, "test_fixture_raises")
    assert broken.fault == "tests"
    assert "fixture `broken` raised `RuntimeError: fixture itself broke` at tests/conftest.py:7" \
        in broken.hint
    teardown = failure(python, "test_passes_and_its_teardown_errors")
    assert teardown.fault == "tests" and teardown.hint.startswith("The teardown of ")
    assert "fixture `bad_teardown`" in teardown.hint


def test_a_fixture_that_calls_code_which_raises_is_still_the_coder_s(python: RunResult) -> None:
    calls = failure(python, "test_fixture_calls_raising_code")
    assert calls.fault is None
    assert "ValueError: code says no was raised at code/mod.py:5" in calls.hint


def test_only_code_faults_send_a_red_run_to_the_coder(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = make_view("python/statuses")
    tests = view / "units" / UNIT / "tests"
    (tests / "test_setup.py").unlink()
    (tests / "test_statuses.py").write_text("import mod\n\ndef test_xfail():\n"
                                            "    assert mod.one() == 2\n")
    result = run_python(PytestRunner(sandbox, python_toolchain_dir), view)
    assert result.next_action == "retry_coder" and result.failures
    assert all(f.fault is None for f in result.failures)


def test_a_module_level_import_of_a_missing_package_in_tests_says_what_the_sandbox_offers(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = make_view("python/statuses")
    (view / "units" / UNIT / "tests" / "test_setup.py").write_text(
        "import requests\n\ndef test_get():\n    assert requests\n"
    )
    result = run_python(PytestRunner(sandbox, python_toolchain_dir), view)
    assert (result.crashed, result.next_action) == (True, "retry_tester")
    assert result.crash_reason is not None
    assert result.crash_reason.startswith(
        "pytest could not import tests/test_setup.py: ModuleNotFoundError: No module named "
        "'requests' (at tests/test_setup.py:1); the sandbox has no package `requests`: it "
        "offers the standard library, pytest 8.4.2"
    )


# --- expected/got, and where a SyntaxError is ----------------------------------------


def test_expected_and_got_keep_a_repr_json_would_change(python: RunResult) -> None:
    counts = failure(python, "test_counts")
    assert (counts.expected, counts.got) == ("{False: 3}", "{False: 2}")
    assert py_literal("(1, 2)") == "(1, 2)" and py_literal("[True, 1]") == [True, 1]
    assert py_literal("{'a': [1, None]}") == {"a": [1, None]}


def test_values_pytest_would_truncate_are_taken_in_full(python: RunResult) -> None:
    big = failure(python, "test_big")
    assert big.expected == list(range(301)) and big.got == list(range(300))


def test_a_value_longer_than_the_cap_is_cut_saying_so() -> None:
    text = repr("x" * (VALUE_CAP + 10))
    cut = py_literal(text)
    assert cut == text[:VALUE_CAP] + CUT_NOTE.format(cap=VALUE_CAP, n=len(text))
    assert cut.endswith(f" [... cut at {VALUE_CAP} of {len(text)} characters]")


@pytest.mark.timeout(120)
def test_a_syntax_error_in_code_is_reported_where_it_is_not_where_it_was_imported(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = make_view("python/statuses")
    pkg = view / "units" / UNIT / "code" / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sql.py").write_text("import os\n\nfrom .utils import helper\n")
    (pkg / "utils.py").write_text("def ok():\n    return 1\n\n\ndef helper(:\n    return 2\n")
    tests = view / "units" / UNIT / "tests"
    (tests / "test_setup.py").write_text("from pkg import sql\n\ndef test_sql():\n"
                                         "    assert sql\n")
    result = run_python(PytestRunner(sandbox, python_toolchain_dir), view)
    assert result.crashed and result.crash_reason is not None
    assert result.crash_reason.endswith("SyntaxError: invalid syntax (at code/pkg/utils.py:5)")
    # A SyntaxError met by a test's own import: the failure's culprit is that line too.
    (tests / "test_setup.py").write_text("def test_sql():\n    from pkg import sql\n"
                                         "    assert sql\n")
    late = run_python(PytestRunner(sandbox, python_toolchain_dir), view)
    found = failure(late, "test_sql")
    assert "code/pkg/utils.py:5" in found.hint and "code/pkg/sql.py:3" not in found.hint


def test_vitest_todo_tests_are_recorded_as_todo_not_silently_skipped(
    sandbox: BwrapSandbox, node_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = make_view("node/statuses-js")
    runner = VitestRunner(sandbox, node_toolchain_dir / "node_modules")
    result = runner.run(view=view, unit_id="statuses-js", run_id=RUN, attempt=1,
                        retry_budget_left=3).result
    # The reporter (the channel) and report.json agree that the two are todo.
    assert (result.ok, result.crashed) == (True, False), result.crash_reason
    assert result.summary.model_dump() == {"total": 4, "passed": 1, "failed": 0, "skipped": 3}
    assert result.statuses is not None
    assert result.statuses.model_dump() == {"errors": 0, "xfailed": 0, "xpassed": 0, "todo": 2}
    assert result.outcomes == {
        "tests/add.test.js::add adds": "passed",
        "tests/add.test.js::add is skipped": "skipped",
        "tests/add.test.js::add handles strings": "todo",
        "tests/add.test.js::add handles NaN": "todo",
    }
