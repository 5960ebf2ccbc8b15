"""A test run starved of CPU is infrastructure: re-run after a backoff, never a failure."""

from __future__ import annotations

from devloop.core.config import Settings
from devloop.core.loop import (
    STARVED_BACKOFF_CAP_S,
    STARVED_BACKOFF_S,
    STARVED_RERUNS,
    awaited_tester_try,
    decide,
)
from devloop.core.models import StepOutcome
from devloop.store.records import UnitState

DONE = StepOutcome()  # a coder step that finished

STARVED = StepOutcome(tester_ran=True, starved=True)
RED = StepOutcome(tester_ran=True, failures=[("POST 400", "500")], hint="h")
CRASH = StepOutcome(tester_ran=True, crashed=True, crash_reason="SyntaxError")


def under_test(**changes: object) -> UnitState:
    return UnitState(status="testing", attempt=2).model_copy(update=changes)


def test_a_starved_run_re_runs_the_tester_after_a_growing_backoff_without_counting() -> None:
    state = under_test(failure_signature="abc", signature_repeats=2)
    delays = []
    for n in range(1, STARVED_RERUNS + 1):
        d = decide(state, DONE, STARVED)
        assert d.action == "retry_tester" and "starved" in d.reason
        assert d.state.status == "testing" and d.state.attempt == 2  # the coder is not sent
        # Not a failure: the signature and its count stay as they were.
        assert (d.state.failure_signature, d.state.signature_repeats) == ("abc", 2)
        assert awaited_tester_try(d.state) == n + 1  # each re-run is a tester try of its own
        delays.append(d.delay_s)
        state = d.state
    assert delays == sorted(delays) and delays[0] > 0 and delays[-1] <= STARVED_BACKOFF_CAP_S


def test_the_first_wait_is_the_configured_one_doubling_to_the_cap() -> None:
    state, delays = under_test(), []
    for _ in range(STARVED_RERUNS):
        d = decide(state, DONE, STARVED, starved_backoff_s=40)
        delays.append(d.delay_s)
        state = d.state
    assert delays == [40, 80, 160, 240, 240, 240]
    assert "re-run in 40 s" in decide(under_test(), DONE, STARVED, starved_backoff_s=40).reason
    # DEVLOOP_STARVED_BACKOFF_S's default is the loop's
    assert Settings.model_fields["starved_backoff_s"].default == STARVED_BACKOFF_S


def test_a_machine_that_stays_overloaded_blocks_the_unit_as_infrastructure() -> None:
    state = under_test(extra={"starved_reruns": STARVED_RERUNS})
    d = decide(state, DONE, STARVED)
    assert d.action == "block" and d.state.status == "blocked" and d.dependents_blocked
    assert d.state.extra["block_kind"] == "infrastructure"
    assert (d.state.blocked_reason or "").startswith("infrastructure: ")
    assert d.reason.startswith("infrastructure: ")


def test_starved_re_runs_do_not_use_up_the_crash_retry_or_the_retry_budget() -> None:
    state = decide(under_test(attempt=5), DONE, STARVED).state  # the last attempt of the budget
    crash = decide(state, DONE, CRASH)
    assert crash.action == "retry_tester"  # the tester's one crash retry is still there
    assert awaited_tester_try(crash.state) == 3


def test_a_red_run_after_starved_ones_retries_the_coder_from_the_first_tester_try() -> None:
    state = decide(decide(under_test(), DONE, STARVED).state, DONE, STARVED).state
    d = decide(state, DONE, RED)
    assert d.action == "retry_coder" and d.state.attempt == 3
    assert awaited_tester_try(d.state) == 1 and d.state.signature_repeats == 1
