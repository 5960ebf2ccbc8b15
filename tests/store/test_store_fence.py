"""Fenced writes land only while the step's lease is its writer's, checked with the write."""

from __future__ import annotations

import time

import pytest

from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, load_step, save_step
from devloop.store import Fence, LeaseLost, RedisStore, UnitState

PID, UNIT = "p1", "u1"
LEASE = (PID, UNIT, 1, "coder")


def taken_over(store: RedisStore) -> Fence:
    """w1's fence, after its lease ran out and w2 took the step."""
    assert store.acquire_lease(*LEASE, owner="w1", ttl_s=60)
    fence = Fence(store.keys(PID).lease(UNIT, 1, "coder"), "w1")
    store.client.delete(fence.lease)  # it ran out while w1 was paused
    assert store.acquire_lease(*LEASE, owner="w2", ttl_s=60)
    return fence


def test_a_checkpoint_lands_while_the_lease_is_held_and_never_after(
    redis_store: RedisStore,
) -> None:
    assert redis_store.acquire_lease(*LEASE, owner="w1", ttl_s=60)
    mine = Fence(redis_store.keys(PID).lease(UNIT, 1, "coder"), "w1")
    redis_store.save_session(PID, "coder", UNIT, {"turns": 1}, fence=mine)
    assert redis_store.load_session(PID, "coder", UNIT) == {"turns": 1}
    redis_store.client.delete(mine.lease)
    redis_store.acquire_lease(*LEASE, owner="w2", ttl_s=60)
    redis_store.save_session(PID, "coder", UNIT, {"turns": 5, "finished": True})  # w2's
    with pytest.raises(LeaseLost, match="no longer held by w1"):
        redis_store.save_session(PID, "coder", UNIT, {"turns": 2}, fence=mine)
    assert redis_store.load_session(PID, "coder", UNIT) == {"turns": 5, "finished": True}


def test_ledger_appends_agent_state_and_notes_of_a_zombie_are_refused(
    redis_store: RedisStore,
) -> None:
    fence = taken_over(redis_store)
    with pytest.raises(LeaseLost):
        redis_store.sink(PID, "timeline", fence).append('{"kind": "unit_coded"}')
    with pytest.raises(LeaseLost):
        redis_store.put_agent_state(PID, "coder-u1-todo.json", b"[]", fence)
    with pytest.raises(LeaseLost):
        redis_store.put_pending_note(PID, "coder", UNIT, "n", "note", fence)
    assert redis_store.sink(PID, "timeline").lines() == []
    assert redis_store.agent_state(PID) == {}
    assert redis_store.memory_notes(PID, "coder") == {}


def test_a_zombies_commit_and_state_change_are_refused(redis_store: RedisStore) -> None:
    redis_store.put_state(PID, UNIT, UnitState(status="coding", attempt=1))
    fence = taken_over(redis_store)
    with pytest.raises(LeaseLost):
        redis_store.commit_files(PID, UNIT, role="coder", attempt=1, base_version=0,
                                 changes={"code/a.py": b"zombie\n"}, fence=fence)
    with pytest.raises(LeaseLost):
        redis_store.cas_state(PID, UNIT, "coding", 1,
                              UnitState(status="testing", attempt=1), fence)
    assert redis_store.unit_files(PID, UNIT).version == 0
    assert redis_store.get_state(PID, UNIT).status == "coding"
    w2 = Fence(fence.lease, "w2")
    applied = redis_store.commit_files(PID, UNIT, role="coder", attempt=1, base_version=0,
                                       changes={"code/a.py": b"owner\n"}, fence=w2)
    assert applied.applied and redis_store.unit_files(PID, UNIT).files["code/a.py"] == b"owner\n"


def test_a_step_record_is_saved_with_its_lease_given_up_only_by_the_holder(
    redis_store: RedisStore,
) -> None:
    msg = StepMsg(pid=PID, unit_id=UNIT, attempt=1)
    record = StepRecord(role="coder", attempt=1, msg=msg, worker="w1", started_at=time.time(),
                        ended_at=time.time())
    fence = taken_over(redis_store)
    with pytest.raises(LeaseLost):
        save_step(redis_store, PID, UNIT, record, fence=fence)
    assert load_step(redis_store, PID, UNIT, "coder", 1, 1) is None
    assert redis_store.lease_owner(*LEASE) == "w2"
    held = Fence(fence.lease, "w2")
    save_step(redis_store, PID, UNIT, record.model_copy(update={"worker": "w2"}), fence=held)
    stored = load_step(redis_store, PID, UNIT, "coder", 1, 1)
    assert stored is not None and stored.worker == "w2"
    assert redis_store.lease_owner(*LEASE) is None  # given up with the record
