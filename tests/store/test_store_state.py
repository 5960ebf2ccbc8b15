"""Unit state: JSON per unit, compare-and-set on (status, attempt)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from devloop.store import RedisStore, UnitState


def test_a_unit_without_state_is_pending_at_attempt_zero(redis_store: RedisStore) -> None:
    assert redis_store.get_state("p1", "u1") == UnitState(status="pending", attempt=0)


def test_put_and_get_round_trip(redis_store: RedisStore) -> None:
    state = UnitState(
        status="failed",
        attempt=2,
        failure_signature="sig",
        signature_repeats=2,
        tokens=1200,
        cost_usd=0.031,
        started_at=1.5,
        updated_at=2.5,
        last_hint="check the 400 path",
        extra={"run_id": "r7", "ü": [1, 2]},
    )
    redis_store.put_state("p1", "u1", state)
    assert redis_store.get_state("p1", "u1") == state


def test_states_of_many_units_are_read_at_once(redis_store: RedisStore) -> None:
    redis_store.put_state("p1", "u1", UnitState(status="testing", attempt=2))
    states = redis_store.get_states("p1", ["u1", "never-written"])
    assert states == {"u1": UnitState(status="testing", attempt=2), "never-written": UnitState()}
    assert redis_store.get_states("p1", []) == {}
    redis_store.put_states("p1", {"u2": UnitState(status="coding", attempt=1), "u3": UnitState()})
    assert redis_store.get_states("p1", ["u2", "u3"]) == {
        "u2": UnitState(status="coding", attempt=1),
        "u3": UnitState(),
    }


def test_cas_applies_only_from_the_expected_status_and_attempt(redis_store: RedisStore) -> None:
    ready = UnitState(status="ready")
    assert redis_store.cas_state("p1", "u1", "pending", 0, ready)
    coding = UnitState(status="coding", attempt=1)
    assert not redis_store.cas_state("p1", "u1", "pending", 0, coding)  # a duplicate
    assert redis_store.cas_state("p1", "u1", "ready", 0, coding)
    assert not redis_store.cas_state("p1", "u1", "coding", 2, UnitState(status="testing"))
    assert redis_store.get_state("p1", "u1") == coding


def test_unknown_status_is_rejected() -> None:
    with pytest.raises(ValidationError):
        UnitState(status="done")
