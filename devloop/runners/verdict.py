"""The verdict from the channel, checked against the exit status, the count and the report.

A runner's verdict is what its plugin streamed (devloop.runners.channel) while the tests
ran. It stands only when everything agrees: every collected test reported exactly once,
a final record, an exit status that says the same (0 for all passed, 1 for failures),
and a report file (junit.xml / report.json, which the tests could rewrite) that names
the same tests failed and passed. Anything else is `DISAGREE` plus what disagreed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from devloop.core.models import SEED_COUNT

DISAGREE = "report and exit status disagree"
# A test's outcome (devloop.core.models.TestOutcome); SEED_COUNT folds it into the seed's three.
Outcome = str


@dataclass
class Tally:
    """The channel's account of a run: one outcome per test, in the report's names."""

    collected: int | None = None
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # test key -> outcome
    labels: dict[str, str] = field(default_factory=dict)  # test key -> name as reported
    end: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)

    def names(self, outcome: Outcome) -> set[str]:
        """The report names of the tests whose outcome counts as this seed outcome
        (passed, failed, skipped: an error is among the failed)."""
        return {self.labels[k] for k, o in self.outcomes.items() if _seed(o) == outcome}

    def exact(self, outcome: Outcome) -> set[str]:
        """The report names of the tests with exactly this outcome (error, xfailed, ...)."""
        return {self.labels[k] for k, o in self.outcomes.items() if o == outcome}

    def by_name(self) -> dict[str, Outcome]:
        """Each test's outcome, by its report name."""
        return {self.labels[k]: o for k, o in self.outcomes.items()}

    @property
    def failed(self) -> int:
        return sum(1 for o in self.outcomes.values() if _seed(o) == "failed")


def _seed(outcome: Outcome) -> str:
    """The seed's count an outcome falls in (an unknown one: skipped, never passed)."""
    return SEED_COUNT.get(outcome, "skipped")


def tally_pytest(records: list[dict[str, Any]]) -> Tally:
    """Fold the pytest plugin's records: a test is done at its teardown phase."""
    tally = Tally()
    phases: dict[str, dict[str, str]] = {}
    for rec in records:
        kind = rec.get("e")
        if kind == "collected":
            _collected(tally, rec)
        elif kind == "end":
            _end(tally, rec)
        elif kind == "phase":
            nodeid, when = str(rec.get("id")), str(rec.get("when"))
            seen = phases.setdefault(nodeid, {})
            if when in seen:
                tally.problems.append(f"{nodeid} ({when}) was reported twice")
            seen[when] = str(rec.get("outcome")) + ("/xfail" if rec.get("xfail") is True else "")
    for nodeid, seen in phases.items():
        if "teardown" not in seen:
            tally.problems.append(f"{nodeid} never finished (no teardown reported)")
            continue
        tally.outcomes[nodeid] = pytest_outcome(seen)
        tally.labels[nodeid] = nodeid
    return tally


def pytest_outcome(phases: dict[str, str]) -> Outcome:
    """One test's outcome from its phases ("failed", "skipped/xfail", ...): a set-up or
    teardown that raised is an error, unless the test itself failed (then it is counted
    once, as failed); a marked xfail that skipped is xfailed, one that passed xpassed (a
    strict one that passed pytest reports failed)."""
    setup, call = phases.get("setup", "passed"), phases.get("call")
    teardown = phases.get("teardown", "passed")
    if setup.startswith("failed"):
        return "error"
    ran = call or setup  # a skip at set-up has no call phase
    if ran.startswith("failed"):
        return "failed"
    if ran.startswith("skipped"):
        return "xfailed" if ran.endswith("/xfail") else "skipped"
    if teardown.startswith("failed"):
        return "error"
    return "xpassed" if ran.endswith("/xfail") else "passed"


def tally_vitest(records: list[dict[str, Any]], relative: Callable[[str], str]) -> Tally:
    """Fold the vitest reporter's records: one per test case, one count per module."""
    tally = Tally()
    modules: set[str] = set()
    for rec in records:
        kind = rec.get("e")
        if kind == "collected":
            module = str(rec.get("module"))
            if module in modules:
                tally.problems.append(f"{relative(module)} was collected twice")
            modules.add(module)
            count = rec.get("n")
            if not isinstance(count, int):
                tally.problems.append("a malformed 'collected' record")
                continue
            tally.collected = (tally.collected or 0) + count
        elif kind == "end":
            _end(tally, rec)
        elif kind == "test":
            key = str(rec.get("id"))
            if key in tally.outcomes:
                tally.problems.append(f"test {rec.get('name')!r} was reported twice")
                continue
            tally.outcomes[key] = str(rec.get("outcome"))
            tally.labels[key] = f"{relative(str(rec.get('module')))}::{rec.get('name')}"
    return tally


def _collected(tally: Tally, rec: dict[str, Any]) -> None:
    """The one count of collected tests (a second one, or a bad one, is a problem)."""
    if tally.collected is not None:
        tally.problems.append("a second 'collected' record")
    elif not isinstance(rec.get("n"), int):
        tally.problems.append("a malformed 'collected' record")
    else:
        tally.collected = rec["n"]


def _end(tally: Tally, rec: dict[str, Any]) -> None:
    """The one final record (a second one is a problem)."""
    if tally.end is not None:
        tally.problems.append("a second final record")
    else:
        tally.end = rec


@dataclass(frozen=True)
class FileReport:
    """What the report file said, per test name: only ever detail, never the verdict."""

    passed: set[str]
    failed: set[str]
    # The tests with each finer outcome the file tells apart (junit.xml: error, xfailed;
    # report.json: todo), to agree with the channel's exact outcomes too.
    exact: dict[str, set[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Exit:
    """The exit status the final record implies, and errors outside any test it names."""

    expected: int | None  # None: the record implies no status (an interrupted run)
    other_errors: int = 0  # a red run with no failed test (vitest: unhandled errors)


def disagreement(
    tally: Tally,
    stream_problems: list[str],
    exit_code: int,
    implied: Exit,
    report: FileReport | None,
) -> str | None:
    """Why the run's accounts disagree (DISAGREE: detail), or None when they all agree."""
    detail = _detail(tally, stream_problems, exit_code, implied, report)
    return f"{DISAGREE}: {detail}" if detail else None


def _detail(
    tally: Tally,
    stream_problems: list[str],
    exit_code: int,
    implied: Exit,
    report: FileReport | None,
) -> str | None:
    expected_exit = implied.expected
    if stream_problems or tally.problems:
        return "; ".join((stream_problems + tally.problems)[:3])
    if tally.end is None:
        return f"the runner sent no final record and exited with status {exit_code}"
    if expected_exit is None or exit_code != expected_exit:
        return (
            f"the runner's final record says status {expected_exit}, "
            f"but it exited with status {exit_code}"
        )
    if tally.collected is None or len(tally.outcomes) != tally.collected:
        return f"{tally.collected} tests collected, {len(tally.outcomes)} reported"
    if (tally.failed > 0 or implied.other_errors > 0) != (exit_code != 0):
        return f"{tally.failed} tests failed, yet the runner exited with status {exit_code}"
    if report is not None:
        pairs = [("failed", report.failed, tally.names("failed")),
                 ("passed", report.passed, tally.names("passed"))]
        pairs += [(o, named, tally.exact(o)) for o, named in sorted(report.exact.items())]
        for outcome, named, streamed in pairs:
            if named != streamed:
                odd = sorted(named ^ streamed)
                return (
                    f"the report file says {len(named)} {outcome}, the runner reported "
                    f"{len(streamed)} (first difference: {odd[0][:200]})"
                )
    return None
