"""Step records and release marks, on every store: a delivered step's first look (its
stored record, the unit's state, the lease), the record that counts, releases claimed once,
and the marks a run leaves. Each test runs on RedisStore and on MemoryStore alike."""

from __future__ import annotations

import pytest

from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, begin_step, load_outcomes, save_step, steps_of
from devloop.fleet.respec import Definition
from devloop.fleet.status import StepProgress, record_progress
from devloop.store import Fence, LeaseLost, RedisStore, UnitState
from devloop.store.inmemory import MemoryStore

AnyStore = RedisStore | MemoryStore
MSG = StepMsg(pid="p1", unit_id="u1", attempt=2)


def _record(role: str = "coder", worker: str = "w1", tester_try: int = 1) -> StepRecord:
    return StepRecord(role=role, attempt=2, tester_try=tester_try, msg=MSG, worker=worker,
                      started_at=1.0 + tester_try, ended_at=2.0)


def test_a_new_step_takes_the_lease_and_sees_the_state(any_store: AnyStore) -> None:
    any_store.put_state("p1", "u1", UnitState(status="coding", attempt=2))
    start = begin_step(any_store, MSG, "coder", "coder", "w1", ttl_s=5)
    assert start.done is None and start.leased
    assert start.state == UnitState(status="coding", attempt=2)
    assert any_store.lease_owner("p1", "u1", 2, "coder") == "w1"
    # Its owner may begin again (a retry of the same delivery); nobody else may.
    assert begin_step(any_store, MSG, "coder", "coder", "w1", ttl_s=5).leased
    busy = begin_step(any_store, MSG, "coder", "coder", "w2", ttl_s=5)
    assert not busy.leased and busy.done is None


def test_a_finished_step_returns_its_record_and_takes_no_lease(any_store: AnyStore) -> None:
    record = _record()
    assert save_step(any_store, "p1", "u1", record) == record
    start = begin_step(any_store, MSG, "coder", "coder", "w2", ttl_s=5)
    assert start.done == record and not start.leased
    assert start.state == UnitState()  # never written: pending at attempt 0
    assert any_store.lease_owner("p1", "u1", 2, "coder") is None
    # The first stored record counts; a second save returns it.
    later = record.model_copy(update={"worker": "w2"})
    assert save_step(any_store, "p1", "u1", later) == record


def test_a_tester_step_sees_its_attempts_coder_record_and_decide_reads_both(
    any_store: AnyStore,
) -> None:
    coder, tester = _record(), _record("tester", tester_try=2)
    save_step(any_store, "p1", "u1", coder)
    msg = MSG.model_copy(update={"tester_try": 2})
    start = begin_step(any_store, msg, "tester", "tester.2", "w1", ttl_s=5)
    assert start.coder == coder and start.done is None and start.leased
    save_step(any_store, "p1", "u1", tester)
    any_store.put_state("p1", "u1", UnitState(status="testing", attempt=2))
    assert load_outcomes(any_store, msg) == (UnitState(status="testing", attempt=2), coder,
                                             tester)
    assert steps_of(any_store, "p1", ["u1", "u2"]) == {"u1": [coder, tester], "u2": []}


def test_a_fenced_record_lands_only_under_its_lease_and_gives_the_lease_up(
    any_store: AnyStore,
) -> None:
    assert begin_step(any_store, MSG, "coder", "coder", "w1", ttl_s=5).leased
    lease = any_store.keys("p1").lease("u1", 2, "coder")
    with pytest.raises(LeaseLost):
        save_step(any_store, "p1", "u1", _record(worker="w2"), fence=Fence(lease, "w2"))
    assert steps_of(any_store, "p1", ["u1"])["u1"] == []
    assert save_step(any_store, "p1", "u1", _record(), fence=Fence(lease, "w1")) == _record()
    assert any_store.lease_owner("p1", "u1", 2, "coder") is None


def test_a_dependent_is_claimed_once_by_the_release_that_completes_it(
    any_store: AnyStore,
) -> None:
    assert any_store.claim_releases("p1", "a", {"c": 2, "d": 1}) == ["d"]
    assert any_store.claim_releases("p1", "b", {"c": 2}) == ["c"]
    assert any_store.claim_releases("p1", "b", {"c": 2}) == []  # a redelivered release
    assert any_store.dispatched_mark("p1", "c") == "b"
    assert any_store.claim_root("p1", "r") and not any_store.claim_root("p1", "r")
    any_store.mark_dispatched("p1", ["r", "e"], "reconciled")
    assert [any_store.dispatched_mark("p1", u) for u in "re"] == ["reconciled", "reconciled"]
    assert any_store.claim_releases("p1", "x", {"e": 1}) == []  # already released


def test_the_marks_a_run_leaves_read_back(any_store: AnyStore) -> None:
    assert any_store.environment_error("p1") is None
    any_store.set_environment_error("p1", "bubblewrap cannot start")
    assert any_store.environment_error("p1") == "bubblewrap cannot start"
    any_store.set_environment_error("p1", None)
    assert any_store.environment_error("p1") is None

    progress = StepProgress(role="coder", attempt=2, since=1.0, turn=3)
    record_progress(any_store, "p1", "u1", progress)
    assert any_store.progress_of("p1", ["u1", "u2"]) == {"u1": progress.model_dump_json().encode()}
    assert any_store.progress_of("p1", []) == {}

    seen = Definition(digests={"spec": "1"}, acceptance=["works"])
    any_store.record_definitions("p1", {"u1": seen.model_dump_json()})
    assert {u: Definition.model_validate_json(v)
            for u, v in any_store.definitions("p1").items()} == {"u1": seen}

    assert any_store.take_reconcile_lock("p1", 60)
    assert not any_store.take_reconcile_lock("p1", 60)
    assert any_store.take_reconcile_lock("p2", 60)


def test_which_steps_hold_their_leases(any_store: AnyStore) -> None:
    assert not any_store.any_lease("p1")
    assert any_store.acquire_lease("p1", "u1", 2, "tester.1", "w1", 5)
    assert any_store.any_lease("p1") and not any_store.any_lease("p2")
    asked = [("u1", 2, "coder"), ("u1", 2, "tester.1")]
    assert any_store.lease_owners("p1", asked) == [None, "w1"]
    assert any_store.lease_owners("p1", []) == []
    assert any_store.release("p1", "u1", 2, "tester.1", "w1")
    assert not any_store.any_lease("p1")
