"""The red/green loop decides every transition of the design's state machine."""

from __future__ import annotations

from devloop import dag
from devloop.loop import AttemptOutcome, decide, failure_signature, unblock
from devloop.store.records import UnitState

RED = AttemptOutcome("completed", tester_ran=True, failures=(("POST 400", "500"),), hint="h")
GREEN = AttemptOutcome("completed", tester_ran=True, tests_ok=True)
CRASH = AttemptOutcome("completed", tester_ran=True, crashed=True, crash_reason="SyntaxError")


def coding(attempt: int = 1, **extra: object) -> UnitState:
    return UnitState(status="testing", attempt=attempt, **extra)  # type: ignore[arg-type]


def test_green_passes() -> None:
    d = decide(coding(), GREEN)
    assert d.action == "pass" and d.state.status == "passed"


def test_red_retries_the_coder_with_the_hint() -> None:
    d = decide(coding(), RED)
    assert d.action == "retry_coder"
    assert (d.state.status, d.state.attempt, d.state.last_hint) == ("coding", 2, "h")
    assert d.state.signature_repeats == 1


def test_a_crash_retries_the_tester_once_then_the_coder() -> None:
    first = decide(coding(), CRASH)
    assert first.action == "retry_tester" and first.state.attempt == 1
    second = decide(first.state, CRASH)
    assert second.action == "retry_coder" and second.state.attempt == 2
    assert second.state.extra["last_outcome"] == "crashed"


def test_validation_failed_retries_the_coder() -> None:
    d = decide(coding(), AttemptOutcome("failed", "validation_failed"))
    assert d.action == "retry_coder" and d.state.extra["last_outcome"] == "validation_failed"


def test_same_failure_three_times_blocks() -> None:
    state = coding()
    actions = []
    for _ in range(3):
        d = decide(state, RED)
        actions.append(d.action)
        state = d.state.model_copy(update={"status": "testing"})
    assert actions == ["retry_coder", "retry_coder", "block"]
    assert d.state.status == "blocked" and d.dependents_blocked
    assert d.reason == "the same failure 3 times"


def test_changing_failures_run_until_the_budget_is_spent() -> None:
    state = coding()
    for n in range(1, 6):
        outcome = AttemptOutcome("completed", tester_ran=True, failures=((f"t{n}", "500"),))
        d = decide(state, outcome)
        state = d.state
    assert d.action == "block" and d.reason == "retry budget of 5 attempts spent"
    assert state.attempt == 5


def test_model_unavailable_resumes_the_same_attempt() -> None:
    d = decide(coding(2), AttemptOutcome("recovery_required", "llm_unavailable"))
    assert d.action == "resume" and d.state.attempt == 2


def test_signature_ignores_order_but_not_what_failed() -> None:
    a = AttemptOutcome("completed", tester_ran=True, failures=(("x", "1"), ("y", "2")))
    b = AttemptOutcome("completed", tester_ran=True, failures=(("y", "2"), ("x", "1")))
    c = AttemptOutcome("completed", tester_ran=True, failures=(("x", "1"), ("y", "3")))
    assert failure_signature(a) == failure_signature(b) != failure_signature(c)


def test_unblock_starts_a_fresh_attempt_with_the_human_hint() -> None:
    blocked = UnitState(status="blocked", attempt=4, failure_signature="s", signature_repeats=3)
    state = unblock(blocked, "use 409 for duplicates")
    assert (state.status, state.attempt, state.signature_repeats) == ("coding", 5, 0)
    assert state.extra["human_hint"] == "use 409 for duplicates"


def test_blocking_reaches_every_downstream_unit() -> None:
    graph = {"db": [], "be": ["db"], "fe": ["be"], "cli": ["db"], "docs": []}
    assert dag.downstream(graph, "db") == ["be", "cli", "fe"]
    assert dag.downstream(graph, "docs") == []
