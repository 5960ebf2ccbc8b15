"""The review gate in the pure loop: green waits for a person, who approves or asks again."""

from __future__ import annotations

from devloop.core.loop import approve, decide, request_changes, review_required, unblock
from devloop.core.models import StepOutcome
from devloop.store.records import UnitState

DONE = StepOutcome()  # a coder step that finished

GREEN = StepOutcome(tester_ran=True, tests_ok=True)
RED = StepOutcome(tester_ran=True, failures=[("t", "1")], hint="h")


def in_testing(attempt: int = 1) -> UnitState:
    return UnitState(status="testing", attempt=attempt)


def test_green_tests_of_a_unit_under_review_wait_in_review_instead_of_passing() -> None:
    d = decide(in_testing(), DONE, GREEN, review=True)
    assert (d.action, d.state.status, d.state.attempt) == ("review", "review", 1)
    assert not d.dependents_blocked


def test_red_tests_under_review_retry_the_coder_as_without_review() -> None:
    assert decide(in_testing(), DONE, RED, review=True) == decide(in_testing(), DONE, RED)


def test_approval_passes_the_unit_at_its_attempt() -> None:
    waiting = decide(in_testing(2), DONE, GREEN, review=True).state
    assert (approve(waiting).status, approve(waiting).attempt) == ("passed", 2)


def test_requested_changes_are_a_coder_retry_carrying_the_note_as_its_hint() -> None:
    waiting = decide(in_testing(2), DONE, GREEN, review=True).state
    note = "name the field title, not name"
    again = request_changes(waiting, note)
    assert (again.status, again.attempt, again.last_hint) == ("coding", 3, note)
    assert again.extra["review_note"] == note


def test_a_units_own_review_field_wins_over_the_projects() -> None:
    assert review_required("required", None)
    assert review_required(None, "required")
    assert not review_required("required", "none")
    assert not review_required(None, None)


def test_unblocking_drops_the_kind_of_the_old_block() -> None:
    blocked = UnitState(status="blocked", attempt=3, extra={"block_kind": "cancelled"})
    assert "block_kind" not in unblock(blocked, "try again").extra
