"""The red/green loop decides every transition of the design's state machine."""

from __future__ import annotations

from devloop.core import dag
from devloop.core.loop import (
    after_step_error,
    attempts_left,
    attempts_spent,
    decide,
    failure_signature,
    recovered,
    request_changes,
    retest,
    started_again,
    unblock,
    wait_for_model,
    waiting_again,
)
from devloop.core.models import StepOutcome
from devloop.store.records import UnitState

DONE = StepOutcome()  # a coder step that finished
NOT_RUN = StepOutcome()  # a tester step over a coder that did not finish: nothing ran

RED = StepOutcome(tester_ran=True, failures=[("POST 400", "500")], hint="h")
GREEN = StepOutcome(tester_ran=True, tests_ok=True)
CRASH = StepOutcome(tester_ran=True, crashed=True, crash_reason="SyntaxError")


def coding(attempt: int = 1, **extra: object) -> UnitState:
    return UnitState(status="testing", attempt=attempt, **extra)  # type: ignore[arg-type]


def test_green_passes() -> None:
    d = decide(coding(), DONE, GREEN)
    assert d.action == "pass" and d.state.status == "passed"


def test_red_retries_the_coder_with_the_hint() -> None:
    d = decide(coding(), DONE, RED)
    assert d.action == "retry_coder"
    assert (d.state.status, d.state.attempt, d.state.last_hint) == ("coding", 2, "h")
    assert d.state.signature_repeats == 1


def test_a_crash_retries_the_tester_once_then_the_coder() -> None:
    first = decide(coding(), DONE, CRASH)
    assert first.action == "retry_tester" and first.state.attempt == 1
    second = decide(first.state, DONE, CRASH)
    assert second.action == "retry_coder" and second.state.attempt == 2
    assert second.state.extra["last_outcome"] == "crashed"


def test_a_crash_the_code_caused_goes_to_the_coder_at_once() -> None:
    # The code reached into the test framework: no tester retry can make such a run stand.
    tampered = StepOutcome(
        tester_ran=True, crashed=True, code_fault=True,
        crash_reason="the code under test changed the test framework: x",
    )
    d = decide(coding(), DONE, tampered)
    assert d.action == "retry_coder" and d.state.attempt == 2
    assert d.state.extra["last_outcome"] == "crashed"


def test_validation_failed_retries_the_coder() -> None:
    d = decide(coding(), StepOutcome(status="failed", reason="validation_failed"), NOT_RUN)
    assert d.action == "retry_coder" and d.state.extra["last_outcome"] == "validation_failed"


def test_same_failure_three_times_blocks() -> None:
    state = coding()
    actions = []
    for _ in range(3):
        d = decide(state, DONE, RED)
        actions.append(d.action)
        state = d.state.model_copy(update={"status": "testing"})
    assert actions == ["retry_coder", "retry_coder", "block"]
    assert d.state.status == "blocked" and d.dependents_blocked
    assert d.reason == "the same failure 3 times"


def test_changing_failures_run_until_the_budget_is_spent() -> None:
    state = coding()
    for n in range(1, 6):
        outcome = StepOutcome(tester_ran=True, failures=[(f"t{n}", "500")])
        d = decide(state, DONE, outcome)
        state = d.state
    assert d.action == "block" and d.reason == "retry budget of 5 attempts spent"
    assert state.attempt == 5


def _fail_until_blocked(state: UnitState, tag: str) -> tuple[UnitState, list[int]]:
    """Changing failures (so never the same one twice) until the loop blocks the unit; the
    attempts it retried through."""
    tried = []
    while True:
        tried.append(state.attempt)
        outcome = StepOutcome(tester_ran=True,
                              failures=[(f"{tag}{state.attempt}", "500")])
        d = decide(state.model_copy(update={"status": "testing"}), DONE, outcome)
        if d.action == "block":
            return d.state, tried
        state = d.state


def test_an_unblocked_unit_gets_the_whole_retry_budget_again() -> None:
    """`devloop unblock --hint` (and `--rerun` of a blocked unit) is a person starting the
    unit again: the budget counts from there, not from attempt 1."""
    blocked, tried = _fail_until_blocked(coding(), "t")
    assert tried == [1, 2, 3, 4, 5] and blocked.blocked_reason == "retry budget of 5 attempts spent"
    again = unblock(blocked, "use integers")
    assert (again.attempt, attempts_spent(again), attempts_left(again)) == (6, 1, 4)
    blocked_again, tried = _fail_until_blocked(again, "u")
    assert tried == [6, 7, 8, 9, 10]  # five more, not one
    assert blocked_again.blocked_reason == "retry budget of 5 attempts spent"


def test_the_same_failure_count_starts_again_when_a_person_unblocks() -> None:
    state = coding()
    for _ in range(3):
        d = decide(state.model_copy(update={"status": "testing"}), DONE, RED)
        state = d.state
    assert d.reason == "the same failure 3 times"
    state = unblock(state, "look at the status code")
    actions = []
    for _ in range(3):
        d = decide(state.model_copy(update={"status": "testing"}), DONE, RED)
        actions.append(d.action)
        state = d.state
    assert actions == ["retry_coder", "retry_coder", "block"]
    assert state.attempt == 6


def test_a_re_test_a_review_or_a_rebuild_starts_the_budget_again() -> None:
    """What a pass or a person starts counts as a fresh start too (why.py tells the same
    attempts as the chain that led to a block)."""
    passed = UnitState(status="passed", attempt=4)
    for started in (retest(passed, "a passed again"),
                    request_changes(passed.model_copy(update={"status": "review"}), "rename"),
                    started_again(waiting_again(passed), now=1.0)):
        assert (started.attempt, attempts_spent(started)) == (5, 1)
        _, tried = _fail_until_blocked(started, "r")
        assert tried == [5, 6, 7, 8, 9]


def test_a_tester_that_fails_its_own_self_check_on_green_tests_is_retried_not_the_coder() -> None:
    own = StepOutcome(tester_ran=True, status="failed",
                      summary="tests/test_a.py mock the module under test")
    first = decide(coding(), DONE, own)
    assert first.action == "retry_tester" and first.state.attempt == 1
    assert "mock the module" in first.state.extra["tester_retry_reason"]
    second = decide(first.state, DONE, own)
    assert second.action == "retry_tester" and second.state.extra["tester_retries"] == 2
    third = decide(second.state, DONE, own)  # bounded: a human looks at the tests
    assert third.action == "block" and third.state.attempt == 1
    assert "the tester failed" in (third.state.blocked_reason or "")


def test_a_red_run_without_failures_is_the_testers_problem() -> None:
    d = decide(coding(), DONE, StepOutcome(tester_ran=True))
    assert d.action == "retry_tester"


def test_a_red_run_the_tests_set_up_broke_is_the_testers_never_the_coders() -> None:
    """A missing fixture or package, a fixture that raised by itself: the tester fixes it."""
    broken = StepOutcome(
        tester_ran=True, failures=[("tests/test_a.py::test_x", "None")],
        setup_fault="the tests' own set-up failed: fixture 'mocker' not found",
    )
    first = decide(coding(), DONE, broken)
    assert first.action == "retry_tester" and first.state.attempt == 1
    assert "fixture 'mocker' not found" in first.state.extra["tester_retry_reason"]
    second = decide(decide(first.state, DONE, broken).state, DONE, broken)
    assert second.action == "block" and second.state.attempt == 1  # never the coder's
    assert "the tester failed" in (second.state.blocked_reason or "")


def test_a_coder_retry_always_carries_the_failures_that_caused_it() -> None:
    d = decide(coding(), DONE, RED)
    assert d.action == "retry_coder" and d.state.last_hint == "h"
    crash = decide(decide(coding(), DONE, CRASH).state, DONE, CRASH)
    assert crash.action == "retry_coder" and crash.state.extra["last_outcome"] == "crashed"


def test_a_model_outage_waits_longer_each_time_up_to_the_cap() -> None:
    state, delays = coding(2), []
    for now in (100.0, 110.0, 130.0, 170.0, 250.0):
        d = wait_for_model(state, "529 overloaded", now, base_s=10, max_s=40, total_s=1000)
        assert d.action == "wait" and d.state.status == "waiting_model"
        assert d.state.last_error == "529 overloaded" and d.state.attempt == 2
        delays.append(d.delay_s)
        state = d.state
    assert delays == [10, 20, 40, 40, 40]
    assert state.extra["waiting_since"] == 100.0


def test_a_model_outage_blocks_after_the_total_and_never_waits_past_it() -> None:
    first = wait_for_model(coding(), "529", 0.0, base_s=10, max_s=100, total_s=25)
    second = wait_for_model(first.state, "529", 10.0, base_s=10, max_s=100, total_s=25)
    assert second.delay_s == 15  # not 20: the total ends at 25 s
    last = wait_for_model(second.state, "529", 25.0, base_s=10, max_s=100, total_s=25)
    assert last.action == "block" and last.dependents_blocked
    assert last.state.blocked_reason == "model unavailable: 529"
    assert last.state.extra["block_kind"] == "model" and "waiting_since" not in last.state.extra


def test_a_step_error_is_retried_with_backoff_then_blocks_as_infrastructure() -> None:
    state, actions = coding(), []
    for _ in range(3):
        d = after_step_error(state, "OSError: disk full", retries=2, base_s=5, max_s=60)
        actions.append((d.action, d.delay_s))
        state = d.state
    assert actions == [("retry_step", 5), ("retry_step", 10), ("block", 0.0)]
    assert state.status == "blocked" and state.last_error == "OSError: disk full"
    assert state.blocked_reason == "infrastructure: OSError: disk full"
    assert state.signature_repeats == 0 and state.failure_signature is None  # not a model failure


def test_a_step_that_ends_normally_drops_the_outage_marks() -> None:
    waiting = wait_for_model(coding(), "529", 0.0, 10, 100, 1000).state
    clean = recovered(waiting)
    assert clean is not None and clean.last_error is None
    assert not {"waiting_since", "model_waits", "resume_at"} & set(clean.extra)
    assert recovered(coding()) is None


def test_signature_ignores_order_but_not_what_failed() -> None:
    a = StepOutcome(tester_ran=True, failures=[("x", "1"), ("y", "2")])
    b = StepOutcome(tester_ran=True, failures=[("y", "2"), ("x", "1")])
    c = StepOutcome(tester_ran=True, failures=[("x", "1"), ("y", "3")])
    assert failure_signature(DONE, a) == failure_signature(DONE, b) != failure_signature(DONE, c)


def test_unblock_starts_a_fresh_attempt_with_the_human_hint() -> None:
    blocked = UnitState(status="blocked", attempt=4, failure_signature="s", signature_repeats=3)
    state = unblock(blocked, "use 409 for duplicates")
    assert (state.status, state.attempt, state.signature_repeats) == ("coding", 5, 0)
    assert state.extra["human_hint"] == "use 409 for duplicates"


def test_blocking_reaches_every_downstream_unit() -> None:
    graph = {"db": [], "be": ["db"], "fe": ["be"], "cli": ["db"], "docs": []}
    assert dag.downstream(graph, "db") == ["be", "cli", "fe"]
    assert dag.downstream(graph, "docs") == []


def test_a_coder_session_that_ran_out_of_budget_or_got_stuck_is_retried_then_blocked() -> None:
    for ended in (StepOutcome(status="budget_exceeded", reason="budget_turns"),
                  StepOutcome(status="stuck", reason="stuck")):
        first = decide(coding(), ended, NOT_RUN)
        assert first.action == "retry_coder" and first.state.attempt == 2  # not passed
        state = first.state
        for _ in range(2):
            last = decide(state.model_copy(update={"status": "testing"}), ended, NOT_RUN)
            state = last.state
        # The same way three times: blocked for a human, never tested green by accident.
        assert (last.action, last.reason) == ("block", "the same failure 3 times")
        assert last.state.status == "blocked"


def test_a_step_outcome_stored_before_the_newer_fields_still_loads() -> None:
    """Step records live in Redis as JSON: one written before code_fault and
    paperwork_missing existed loads with their defaults, and says which it lacked."""
    old = ('{"status": "completed", "reason": "end_turn", "summary": null, "tester_ran": true,'
           ' "tests_ok": false, "crashed": true, "crash_reason": "SyntaxError",'
           ' "failures": [["t", "500"]], "hint": "h", "starved": false, "setup_fault": null}')
    outcome = StepOutcome.model_validate_json(old)
    assert outcome.failures == [("t", "500")] and outcome.paperwork_missing == []
    assert "code_fault" not in outcome.model_fields_set  # decide_after judges it then
    assert decide(coding(), DONE, outcome).action == "retry_tester"
