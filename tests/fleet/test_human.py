"""People's actions in Redis: who needs a human, a new spec with a retry, a unit's cancel
and its resume, and the task ids a cancel revokes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devloop.fleet.control import read_control, stop_reason
from devloop.fleet.dispatch import enqueue_project, unblock_unit
from devloop.fleet.human import (
    cancel_project,
    cancel_unit,
    needs_human,
    resume_project,
    retry_with_spec,
)
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build

PID = "p-fleet"


@pytest.fixture
def project(redis_store: RedisStore, tmp_path: Path) -> RedisStore:
    plans = [UnitPlan("a"), UnitPlan("b", ["a"]), UnitPlan("c"), UnitPlan("d")]
    enqueue_project(redis_store, build(tmp_path / "p", plans))
    return redis_store


def test_blocked_units_come_first_then_those_awaiting_review(project: RedisStore) -> None:
    project.put_state(PID, "c", UnitState(status="review", attempt=1))
    project.put_state(PID, "d", UnitState(status="blocked", attempt=3, last_hint="h",
                                          blocked_reason="the same failure 3 times"))
    calls = needs_human(project, PID)
    assert [(c.unit, c.status, c.reason, c.hint) for c in calls] == [
        ("d", "blocked", "the same failure 3 times", "h"),
        ("c", "review", "tests green; waiting for a person's review", None),
    ]


def test_new_acceptance_criteria_retry_a_blocked_unit_with_what_changed(
    project: RedisStore,
) -> None:
    project.put_state(PID, "d", UnitState(status="blocked", attempt=3, blocked_reason="x"))
    chains = retry_with_spec(project, PID, "d", ["value() returns 42", "", "it is an int"],
                             "see the new criteria", "a person")
    assert [(c.msg.unit_id, c.msg.attempt) for c in chains] == [("d", 4)]
    spec = project.unit_spec(PID, "d")
    assert spec is not None and spec.acceptance_criteria == ["value() returns 42", "it is an int"]
    on_disk = json.loads(project.unit_file(PID, "d", "spec.json") or b"{}")
    assert on_disk["acceptance_criteria"] == ["value() returns 42", "it is an int"]
    state = project.get_state(PID, "d")
    assert state.status == "coding" and "- it is an int" in (state.last_hint or "")
    with pytest.raises(ValueError, match="edit a blocked unit or one in review"):
        retry_with_spec(project, PID, "a", ["x"], "", "a person")


def test_a_cancelled_unit_stops_blocks_its_dependents_and_unblock_resumes_its_attempt(
    project: RedisStore,
) -> None:
    project.put_state(PID, "a", UnitState(status="coding", attempt=2))
    revoked = cancel_unit(project, PID, "a", "a person")
    assert revoked == [f"{PID}:a:coder:2", f"{PID}:a:tester:2", f"{PID}:a:decide:2"]
    state = project.get_state(PID, "a")
    assert (state.status, state.blocked_reason) == ("blocked", "cancelled by a person")
    assert project.get_state(PID, "b").status == "blocked_upstream"
    assert stop_reason(project, PID, "a") == "cancelled"  # its running session stops
    assert needs_human(project, PID)[0].unit == "a"
    [again] = unblock_unit(project, PID, "a", None)  # no hint: it carries on where it was
    assert (again.msg.attempt, again.msg.epoch) == (2, 1)  # a task id never revoked
    assert project.get_state(PID, "a").status == "coding"
    assert project.get_state(PID, "b").status == "pending"
    assert stop_reason(project, PID, "a") is None


def test_a_unit_cancelled_before_it_started_waits_for_its_dependencies_again(
    project: RedisStore,
) -> None:
    # b waits for a, which has not passed: cancelled, then carried on, it is pending again.
    cancel_unit(project, PID, "b", "a person")
    assert project.get_state(PID, "b").status == "blocked"
    assert unblock_unit(project, PID, "b", None) == []  # no chain before a passes
    state = project.get_state(PID, "b")
    assert (state.status, state.attempt) == ("pending", 0)
    cancel_unit(project, PID, "b", "a person")
    project.put_state(PID, "a", UnitState(status="passed", attempt=1))
    chains = resume_project(project, PID, None)
    assert [(c.msg.unit_id, c.msg.attempt) for c in chains if c.msg.unit_id == "b"] == [("b", 1)]
    assert project.get_state(PID, "b").status == "coding"


def test_cancelling_the_project_pauses_it_and_resume_re_sends_what_was_moving(
    project: RedisStore,
) -> None:
    project.put_state(PID, "c", UnitState(status="testing", attempt=1, updated_at=1))
    revoked = cancel_project(project, PID, "a person")
    assert f"{PID}:c:tester:1" in revoked and f"{PID}:a:coder:1" in revoked
    assert read_control(project, PID).paused == "cancelled"
    assert stop_reason(project, PID, "d") == "cancelled"
    chains = resume_project(project, PID, 3.0)
    assert {c.msg.unit_id for c in chains} == {"a", "c", "d"}
    assert all(c.msg.epoch == 1 for c in chains)
    control = read_control(project, PID)
    assert (control.paused, control.max_usd) == (None, 3.0)
