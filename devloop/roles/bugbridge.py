"""Bridge test runs to bugs.ndjson: failures open bugs, a green run fixes them."""

from __future__ import annotations

import re

from devloop.core.models import BugMove, Failure, RunResult
from devloop.ledgers import BugLedger
from devloop.runners.base import decisive_lines


def guess_severity(failure: Failure) -> str:
    """The specification's order: high for a 5xx (or a crash), then critical for
    auth/security tests, else medium."""
    if re.search(r"\b5\d\d\b", str(failure.got)) or "Error" in str(failure.got):
        return "high"
    name = failure.test.lower()
    if "security" in name or "auth" in name:
        return "critical"
    return "medium"


def what_failed(failure: Failure) -> str:
    """`expected X, got Y`, or the error line when the test raised instead of comparing."""
    if failure.expected is not None or failure.got is not None:
        return f"expected {failure.expected}, got {failure.got}"
    error = decisive_lines(failure.stack, limit=1)
    return re.sub(r"^E\s+", "", error)[:200] or "failed"


def bridge_run(bugs: BugLedger, result: RunResult) -> tuple[list[str], list[BugMove]]:
    """Record a run in the bug ledger; returns (bugs opened, bugs transitioned).

    Each failure gets the id of its open bug (de-duplicated by unit and test name; a bug
    being fixed, or fixed, is reopened); a crashed run opens one infrastructure bug; a
    green run moves the unit's open and fixing bugs to fixed with the run id as the fix
    reference.
    """
    opened: list[str] = []
    moved: list[BugMove] = []
    if result.crashed:
        bug, new = bugs.open(
            result.unit_id,
            result.run_id,
            "(test run crashed)",
            source="unit_test_infra",
            severity="high",
            title=f"test run crashed: {(result.crash_reason or '')[:120]}",
            detail=result.crash_reason or "",
        )
        if new:
            opened.append(bug.id)
        return opened, moved
    for failure in result.failures:
        bug, new = bugs.open(
            result.unit_id,
            result.run_id,
            failure.test,
            severity=guess_severity(failure),
            title=f"{failure.test}: {what_failed(failure)}",
            detail=failure.stack[:4000],
        )
        failure.bug_id = bug.id
        if new:
            opened.append(bug.id)
    if result.ok:
        for bug in bugs.list(unit_id=result.unit_id, status=("open", "fixing")):
            bugs.transition(bug.id, "fixed", by="tester", fix_refs=[result.run_id])
            moved.append(BugMove(id=bug.id, from_=bug.status, to="fixed"))
    return opened, moved
