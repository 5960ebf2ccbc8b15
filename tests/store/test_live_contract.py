"""The live side's store contract: RedisStore and MemoryLive give the same answers about
the events stream, test runs' output and what the live status reads of a unit."""

from __future__ import annotations

import pytest

from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, field, save_step
from devloop.store import RedisStore, UnitState
from devloop.store.inmemory_live import MemoryLive
from devloop.store.live import EventsRead, UnitRead
from devloop.store.live import after as later
from devloop.store.protocols_live import LiveStore
from devloop.store.state import event_states
from tests.store.live_stores import KINDS, live_store

PID = "p-live"


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest) -> LiveStore:
    return live_store(request)


def trim(store: LiveStore, keep: int) -> None:
    """Keep only the newest `keep` events, as the cap does once more came in."""
    if isinstance(store, RedisStore):
        store.client.xtrim(store.keys(PID).events, maxlen=keep, approximate=False)
    else:
        assert isinstance(store, MemoryLive)
        store.events_cap = keep
        store.add_event(PID, {"kind": "trim"})


def test_an_empty_stream_has_no_position_and_nothing_after_it(store: LiveStore) -> None:
    assert store.last_event_id(PID) == "0-0"
    assert store.events_after(PID, "0-0") == EventsRead([], False)


def test_events_come_back_in_order_as_bytes_after_any_position(store: LiveStore) -> None:
    ids = [store.add_event(PID, {"kind": "state", "unit": f"u{i}", "attempt": i})
           for i in range(5)]
    assert all(later(b, a) for a, b in zip(ids, ids[1:], strict=False))
    assert store.last_event_id(PID) == ids[-1]
    every = store.events_after(PID, "0-0").entries
    assert [i for i, _ in every] == ids
    assert every[2][1] == {b"kind": b"state", b"unit": b"u2", b"attempt": b"2"}
    rest = store.events_after(PID, ids[2])
    assert [i for i, _ in rest.entries] == ids[3:] and not rest.trimmed
    assert store.events_after(PID, ids[-1]) == EventsRead([], False)
    assert store.events_after("other", "0-0").entries == []  # per project


def test_a_reader_is_told_when_events_after_its_position_were_trimmed(
        store: LiveStore) -> None:
    ids = [store.add_event(PID, {"kind": "state", "unit": "u"}) for _ in range(6)]
    trim(store, 2)
    behind = store.events_after(PID, ids[1])
    assert behind.trimmed and ids[2] not in [i for i, _ in behind.entries]
    newest = store.last_event_id(PID)
    assert not store.events_after(PID, newest).trimmed


def test_a_runs_output_is_read_whole_or_after_an_entry_and_ends(store: LiveStore) -> None:
    assert store.latest_output_run(PID, "u") is None
    assert store.read_output(PID, "u", None).chunks == []
    store.start_output(PID, "u", "run-1-1", keep=3)
    store.add_output(PID, "u", "run-1-1", {"stdout": "a\n", "stderr": "b\n"})
    first = store.read_output(PID, "u", "run-1-1")
    assert first.chunks == [("stdout", "a\n"), ("stderr", "b\n")] and not first.ended
    store.add_output(PID, "u", "run-1-1", {"stdout": "c\n"}, end=True)
    rest = store.read_output(PID, "u", "run-1-1", first.last_id)
    assert rest.chunks == [("stdout", "c\n")] and rest.ended and later(rest.last_id, first.last_id)
    assert store.read_output(PID, "u", "run-1-1").text == "a\nb\nc\n"
    told = [(f[b"kind"], f[b"unit"], f[b"run"]) for _, f in store.events_after(PID, "0-0").entries]
    assert told == [(b"output", b"u", b"run-1-1"), (b"output_end", b"u", b"run-1-1")]


def test_a_run_started_again_starts_empty_and_only_the_newest_runs_are_kept(
        store: LiveStore) -> None:
    for run in ("run-1-1", "run-2-1", "run-3-1"):
        store.start_output(PID, "u", run, keep=2)
        store.add_output(PID, "u", run, {"stdout": run})
    assert store.output_runs(PID, "u") == ["run-3-1", "run-2-1"]
    assert store.read_output(PID, "u", "run-1-1").chunks == []
    store.start_output(PID, "u", "run-2-1", keep=2)  # the same run again: newest, emptied
    assert store.output_runs(PID, "u") == ["run-2-1", "run-3-1"]
    assert store.read_output(PID, "u", "run-2-1").chunks == []
    assert store.read_output(PID, "u", "run-3-1").text == "run-3-1"
    assert store.output_runs(PID, "v") == []


def test_ids_that_break_the_id_rule_never_reach_the_store(store: LiveStore) -> None:
    with pytest.raises(ValueError):
        store.start_output(PID, "../u", "run-1-1", keep=2)
    with pytest.raises(ValueError):
        store.add_output(PID, "u", "run 1", {"stdout": "x"})


def test_a_units_state_and_step_records_read_back_as_stored_with_an_event(
        store: LiveStore) -> None:
    assert isinstance(store, RedisStore | MemoryLive)
    state = UnitState(status="testing", attempt=2, scripted=True)
    store.put_state(PID, "u", state)
    record = StepRecord(role="coder", attempt=2, msg=StepMsg(pid=PID, unit_id="u", attempt=2),
                        worker="w1", started_at=1.0, ended_at=2.0, tokens=9)
    if isinstance(store, RedisStore):
        save_step(store, PID, "u", record)
    else:
        store.put_step(PID, "u", field("coder", 2, 1), record.model_dump_json())
    read, never = store.unit_reads(PID, ["u", "v"])
    assert read.raw_state is not None and UnitState.model_validate_json(read.raw_state) == state
    assert {k: StepRecord.model_validate_json(v) for k, v in read.raw_steps.items()} == {
        b"coder:2:1": record}
    assert never == UnitRead(None, {}, 0, 0)
    (_, fields), = store.events_after(PID, "0-0").entries
    assert event_states(fields) == [("u", "testing", 2)] and fields[b"scripted"] == b"1"
    shared = store.shared_read(PID, [("u", 2, "coder")], ["u"], "run.json")
    assert shared.held == set() and shared.progress == {}
