"""A delivered step's first look: its stored record, the unit's state, and the lease."""

from __future__ import annotations

from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, begin_step, save_step
from devloop.store import RedisStore, UnitState

MSG = StepMsg(pid="p1", unit_id="u1", attempt=2)


def test_a_new_step_takes_the_lease_and_sees_the_state(redis_store: RedisStore) -> None:
    redis_store.put_state("p1", "u1", UnitState(status="coding", attempt=2))
    start = begin_step(redis_store, MSG, "coder", "coder", "w1", ttl_s=5)
    assert start.done is None and start.leased
    assert start.state == UnitState(status="coding", attempt=2)
    assert redis_store.lease_owner("p1", "u1", 2, "coder") == "w1"
    # Its owner may begin again (a retry of the same delivery); nobody else may.
    assert begin_step(redis_store, MSG, "coder", "coder", "w1", ttl_s=5).leased
    busy = begin_step(redis_store, MSG, "coder", "coder", "w2", ttl_s=5)
    assert not busy.leased and busy.done is None


def test_a_finished_step_returns_its_record_and_takes_no_lease(redis_store: RedisStore) -> None:
    record = StepRecord(
        role="coder", attempt=2, msg=MSG, worker="w1", started_at=1.0, ended_at=2.0
    )
    assert save_step(redis_store, "p1", "u1", record) == record
    start = begin_step(redis_store, MSG, "coder", "coder", "w2", ttl_s=5)
    assert start.done == record and not start.leased
    assert start.state == UnitState()  # never written: pending at attempt 0
    assert redis_store.lease_owner("p1", "u1", 2, "coder") is None
    # The first stored record counts; a second save returns it.
    later = record.model_copy(update={"worker": "w2"})
    assert save_step(redis_store, "p1", "u1", later) == record
