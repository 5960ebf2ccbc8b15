"""The channel's account against the exit status, the count and the report file (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from devloop.runners.channel import parse
from devloop.runners.verdict import (
    Exit,
    FileReport,
    disagreement,
    pytest_outcome,
    tally_pytest,
    tally_vitest,
)

A, B = "tests/test_a.py::test_a", "tests/test_a.py::test_b"


def phases(nodeid: str, call: str = "passed") -> list[dict[str, Any]]:
    """The three phase records pytest's plugin sends for one test."""
    return [
        {"e": "phase", "id": nodeid, "when": "setup", "outcome": "passed"},
        {"e": "phase", "id": nodeid, "when": "call", "outcome": call},
        {"e": "phase", "id": nodeid, "when": "teardown", "outcome": "passed"},
    ]


def pytest_verdict(
    records: list[dict[str, Any]], exit_code: int, report: FileReport | None = None
) -> str | None:
    tally = tally_pytest(records)
    status = tally.end.get("status") if tally.end else None
    return disagreement(tally, [], exit_code, Exit(status), report)


RED = [{"e": "collected", "n": 2}, *phases(A), *phases(B, "failed"), {"e": "end", "status": 1}]
GREEN = [{"e": "collected", "n": 2}, *phases(A), *phases(B), {"e": "end", "status": 0}]


def test_a_red_run_whose_accounts_agree_has_no_disagreement() -> None:
    assert pytest_verdict(RED, 1, FileReport(passed={A}, failed={B})) is None
    assert pytest_verdict(GREEN, 0, FileReport(passed={A, B}, failed=set())) is None


@pytest.mark.parametrize(
    ("records", "exit_code", "report", "detail"),
    [
        # All passed on the channel, but pytest exited 1 (a test's atexit forced it).
        (GREEN[:-1] + [{"e": "end", "status": 1}], 1, None, "0 tests failed, yet the runner"),
        (GREEN, 1, None, "the runner's final record says status 0, but it exited with status 1"),
        (RED, 0, None, "final record says status 1, but it exited with status 0"),
        (RED[:-1], 1, None, "the runner sent no final record and exited with status 1"),
        (RED[:-1], 137, None, "no final record and exited with status 137"),
        ([{"e": "collected", "n": 3}, *GREEN[1:]], 0, None, "3 tests collected, 2 reported"),
        (GREEN[:4] + GREEN[7:], 0, None, "2 tests collected, 1 reported"),
        (GREEN[:-2] + GREEN[-1:], 0, None, f"{B} never finished"),
        (RED + phases(B), 1, None, f"{B} (setup) was reported twice"),
        (phases(B) + RED, 1, None, f"{B} (setup) was reported twice"),
        (RED + [{"e": "end", "status": 0}], 1, None, "a second final record"),
        (RED + [{"e": "collected", "n": 1}], 1, None, "a second 'collected' record"),
        ([{"e": "collected", "n": "2"}, *RED[1:]], 1, None, "a malformed 'collected' record"),
        (GREEN, 0, FileReport(passed={A}, failed={B}), "the report file says 1 failed"),
        (RED, 1, FileReport(passed={A, B}, failed=set()), "the report file says 0 failed"),
    ],
)
def test_any_disagreement_is_named(
    records: list[dict[str, Any]], exit_code: int, report: FileReport | None, detail: str
) -> None:
    found = pytest_verdict(records, exit_code, report)
    assert found is not None and found.startswith("report and exit status disagree: ")
    assert detail in found


def test_a_broken_stream_is_a_disagreement_whatever_the_records_say() -> None:
    text = b"".join(
        f'{{"e": "{r["e"]}"}}\n'.encode() if r["e"] != "phase" else b"" for r in GREEN
    )
    for data in (b"not json\n", b'{"e": "end"', b"[1, 2]\n", text + b'{"no": "kind"}\n'):
        stream = parse(data)
        assert stream.problems
        tally = tally_pytest(stream.records)
        found = disagreement(tally, stream.problems, 0, Exit(0), None)
        assert found is not None and found.startswith("report and exit status disagree: the ")


def rel(path: str) -> str:
    return path.removeprefix("/project/units/u/")


SPEC = "/project/units/u/tests/a.spec.js"


def vitest_records(outcomes: dict[str, str], reason: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = [{"e": "collected", "module": SPEC, "n": len(outcomes)}]
    for i, (name, outcome) in enumerate(outcomes.items()):
        records.append({"e": "test", "id": f"t{i}", "module": SPEC, "name": name,
                        "outcome": outcome})  # fmt: skip
    records.append({"e": "module", "module": SPEC, "errors": 0})
    records.append({"e": "end", "reason": reason, "modules": 1, "unhandled": 0})
    return records


def vitest_verdict(records: list[dict[str, Any]], exit_code: int) -> str | None:
    tally = tally_vitest(records, rel)
    reason = (tally.end or {}).get("reason")
    expected = 1 if reason == "failed" else 0 if reason == "passed" else None
    errors = 1 if reason == "failed" else 0
    report = FileReport(passed=tally.names("passed"), failed=tally.names("failed"))
    return disagreement(tally, [], exit_code, Exit(expected, errors), report)


def test_vitest_tests_with_the_same_name_are_two_tests_not_a_duplicate() -> None:
    records = vitest_records({"same": "passed"}, "passed")
    twin = {"e": "test", "id": "t9", "module": SPEC, "name": "same", "outcome": "passed"}
    records.insert(2, twin)
    records[0]["n"] = 2
    assert vitest_verdict(records, 0) is None


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        # a worker re-reports a failed test as passed
        (lambda r: r.insert(2, {**r[1], "outcome": "passed"}), "test 'b' was reported twice"),
        # a second module count covering forged tests
        (lambda r: r.insert(0, {"e": "collected", "module": SPEC, "n": 1}), "collected twice"),
        # a forged final record saying the run passed
        (lambda r: r.insert(1, {"e": "end", "reason": "passed"}), "a second final record"),
        # vitest killed before its final record
        (lambda r: r.pop(), "no final record"),
    ],
)
def test_vitest_forgeries_are_disagreements(change: Any, detail: str) -> None:
    records = vitest_records({"b": "failed"}, "failed")
    change(records)
    found = vitest_verdict(records, 1)
    assert found is not None and detail in found


def test_the_finer_outcomes_must_agree_with_the_report_file_too() -> None:
    # B's set-up raised: the channel says error, and junit.xml must say so as well.
    setup_error = [
        {"e": "collected", "n": 2}, *phases(A),
        {"e": "phase", "id": B, "when": "setup", "outcome": "failed"},
        {"e": "phase", "id": B, "when": "teardown", "outcome": "passed"},
        {"e": "end", "status": 1},
    ]
    agreed = FileReport(passed={A}, failed={B}, exact={"error": {B}, "xfailed": set()})
    assert pytest_verdict(setup_error, 1, agreed) is None
    called_a_failure = FileReport(passed={A}, failed={B}, exact={"error": set()})
    detail = pytest_verdict(setup_error, 1, called_a_failure)
    assert detail == ("report and exit status disagree: the report file says 0 error, the "
                      f"runner reported 1 (first difference: {B})")


def test_pytest_phases_fold_into_one_outcome_per_test() -> None:
    assert pytest_outcome({"setup": "failed", "teardown": "passed"}) == "error"
    assert pytest_outcome({"setup": "passed", "call": "failed", "teardown": "failed"}) == "failed"
    assert pytest_outcome({"setup": "passed", "call": "passed", "teardown": "failed"}) == "error"
    assert pytest_outcome({"setup": "passed", "call": "skipped/xfail", "teardown": "passed"}) \
        == "xfailed"
    assert pytest_outcome({"setup": "passed", "call": "passed/xfail", "teardown": "passed"}) \
        == "xpassed"
    assert pytest_outcome({"setup": "skipped", "teardown": "passed"}) == "skipped"
