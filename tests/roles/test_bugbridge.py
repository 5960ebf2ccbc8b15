"""Test runs bridged to the bug ledger: severity in the specification's order, the lifecycle."""

from __future__ import annotations

from pathlib import Path

from devloop.core.models import Failure, RunResult
from devloop.ledgers.bugs import BugLedger
from devloop.ledgers.sink import FileSink
from devloop.roles.bugbridge import bridge_run, guess_severity


def failing(test: str, got: object) -> Failure:
    return Failure(test=test, expected=200, got=got, hint="h")


def test_a_5xx_is_high_even_in_an_auth_test_as_the_specification_orders_it() -> None:
    assert guess_severity(failing("POST /login auth with a bad token", 500)) == "high"
    assert guess_severity(failing("POST /login auth with a bad token", 401)) == "critical"
    assert guess_severity(failing("security: no stack traces", 200)) == "critical"
    assert guess_severity(failing("GET /todos lists them", 404)) == "medium"


def test_a_red_run_reopens_a_bug_being_fixed_and_a_green_run_fixes_it(tmp_path: Path) -> None:
    bugs = BugLedger(FileSink(tmp_path / "bugs.ndjson"))
    red = RunResult(run_id="run-1-1", unit_id="u", attempt=1, ok=False,
                    failures=[failing("t", 500)])
    [opened], _ = bridge_run(bugs, red)
    bugs.transition(opened, "fixing", by="loop", attempt=2)
    again = RunResult(run_id="run-2-1", unit_id="u", attempt=2, ok=False,
                      failures=[failing("t", 500)])
    reopened, _ = bridge_run(bugs, again)
    assert reopened == [opened] and again.failures[0].bug_id == opened
    bugs.transition(opened, "fixing", by="loop", attempt=3)
    green = RunResult(run_id="run-3-1", unit_id="u", attempt=3, ok=True)
    _, moved = bridge_run(bugs, green)
    assert [(m.id, m.from_, m.to) for m in moved] == [(opened, "fixing", "fixed")]
    bug = bugs.get(opened)
    assert bug is not None and [(t.to, t.by) for t in bug.history] == [
        ("fixing", "loop"), ("open", "tester"), ("fixing", "loop"), ("fixed", "tester")
    ]
