"""The ledgers by unit (store/ledgerindex.py): each unit's entries in a stream of its own,
written with the entry, so a unit's history is read by key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devloop.ledgers import BugLedger, Timeline
from devloop.project.load import load_project
from devloop.store import Fence, LeaseLost, RedisStore

PID = "p-todo"


def _timeline(store: RedisStore) -> Timeline:
    return Timeline(store.sink(PID, "timeline"))


def test_a_units_entries_are_read_from_its_own_stream_with_the_ledgers_ids(
    redis_store: RedisStore,
) -> None:
    timeline = _timeline(redis_store)
    for n in range(30):
        timeline.append("unit_coded", unit_id=f"u{n % 3}", summary=f"event {n}")
    timeline.append("project_cancelled", agent="human", summary="no unit")
    keys = redis_store.keys(PID)
    mine = redis_store.client.xrange(keys.unit_ledger("timeline", "u1"))
    everything = redis_store.client.xrange(keys.stream("timeline"))
    assert [entry for entry in everything if b'"u1"' in entry[1][b"line"]] == mine
    assert len(mine) == 10
    view = Timeline(redis_store.unit_sink(PID, "timeline", "u1"))
    assert view.events() == timeline.events(unit_id="u1")
    # Appending through a unit's view writes the ledger (and so the unit's stream too).
    view.append("unit_tested", unit_id="u1", summary="from the view")
    assert timeline.events()[-1].summary == "from the view"
    assert view.events()[-1].summary == "from the view"


def test_a_bugs_transitions_follow_its_unit_though_their_lines_name_only_the_bug(
    redis_store: RedisStore,
) -> None:
    ledger = BugLedger(redis_store.sink(PID, "bugs"))
    mine, _ = ledger.open("u1", "run-1-1", "tests/test_a.py::test_x")
    other, _ = ledger.open("u2", "run-1-1", "tests/test_b.py::test_y")
    ledger.transition(mine.id, "fixing", by="loop")
    ledger.transition(other.id, "fixed", by="loop")
    ledger.transition(mine.id, "fixed", by="loop")
    view = BugLedger(redis_store.unit_sink(PID, "bugs", "u1"))
    assert view.list(unit_id="u1") == ledger.list(unit_id="u1")
    assert [b.status for b in view.list()] == ["fixed"]
    assert len(redis_store.unit_sink(PID, "bugs", "u1").lines()) == 3  # its own lines only


def test_a_fenced_append_that_lost_its_lease_lands_in_neither_stream(
    redis_store: RedisStore,
) -> None:
    keys = redis_store.keys(PID)
    fence = Fence(keys.lease("u1", 1, "coder"), "w1")
    redis_store.client.set(fence.lease, "w2")  # taken over while w1 was paused
    with pytest.raises(LeaseLost):
        redis_store.sink(PID, "timeline", fence).append(json.dumps({"kind": "x", "unit_id": "u1"}))
    assert redis_store.client.xlen(keys.stream("timeline")) == 0
    assert redis_store.client.xlen(keys.unit_ledger("timeline", "u1")) == 0
    redis_store.client.set(fence.lease, "w1")
    redis_store.sink(PID, "timeline", fence).append(json.dumps({"kind": "x", "unit_id": "u1"}))
    assert redis_store.client.xlen(keys.unit_ledger("timeline", "u1")) == 1


def test_a_ledger_written_before_the_index_is_read_whole_until_an_import_indexes_it(
    redis_store: RedisStore, todo_project: Path
) -> None:
    keys = redis_store.keys(PID)
    ts = "2026-01-01T00:00:00Z"
    old = [{"ts": ts, "kind": "unit_coded", "unit_id": "todo-be", "summary": f"old {n}"}
           for n in range(3)]
    old += [{"ts": ts, "kind": "unit_coded", "unit_id": "todo-fe", "summary": "old fe"}]
    for event in old:  # as an earlier DevLoop wrote them: the stream alone
        redis_store.client.xadd(keys.stream("timeline"), {"line": json.dumps(event)})
    redis_store.client.xadd(keys.stream("bugs"), {"line": json.dumps(
        {"event": "bug_open", "id": "B1", "ts": "2026-01-01T00:00:00Z", "source": "unit_test",
         "unit_id": "todo-be", "run_id": "r", "test_name": "t", "title": "t"})})
    redis_store.client.xadd(keys.stream("bugs"), {"line": json.dumps(
        {"event": "bug_transition", "id": "B1", "ts": "2026-01-01T00:00:01Z", "to": "fixed",
         "by": "loop"})})
    timeline = _timeline(redis_store)
    timeline.append("unit_tested", unit_id="todo-be", summary="new")  # indexed, the rest not
    view = Timeline(redis_store.unit_sink(PID, "timeline", "todo-be"))
    wanted = ["old 0", "old 1", "old 2", "new"]
    assert [e.summary for e in view.events(unit_id="todo-be")] == wanted  # read whole
    report = redis_store.import_project(load_project(todo_project))
    assert report.changed
    mine = redis_store.client.xrange(keys.unit_ledger("timeline", "todo-be"))
    assert [json.loads(f[b"line"])["summary"] for _id, f in mine] == wanted
    assert [i for i, _ in mine] == [i for i, f in redis_store.client.xrange(
        keys.stream("timeline")) if b"todo-be" in f[b"line"]]  # the ledger's own ids
    assert [e.summary for e in view.events()] == wanted  # now from its own stream
    bugs = BugLedger(redis_store.unit_sink(PID, "bugs", "todo-be"))
    assert [b.status for b in bugs.list()] == ["fixed"]
    timeline.append("loop_pass", unit_id="todo-be", summary="after")
    assert [e.summary for e in view.events()] == [*wanted, "after"]
    assert not redis_store.import_project(load_project(todo_project)).changed


def test_a_folders_ledgers_are_indexed_as_they_are_imported(
    redis_store: RedisStore, todo_project: Path
) -> None:
    lines = [json.dumps({"event": "bug_open", "id": "B7", "ts": "2026-01-01T00:00:00Z",
                         "source": "unit_test", "unit_id": "todo-fe", "run_id": "r",
                         "test_name": "t", "title": "t"}),
             json.dumps({"event": "bug_transition", "id": "B7", "ts": "2026-01-01T00:00:01Z",
                         "to": "fixed", "by": "loop"})]
    (todo_project / "bugs.ndjson").write_text("\n".join(lines) + "\n")
    (todo_project / "timeline.ndjson").write_text(
        json.dumps({"ts": "2026-01-01T00:00:00Z", "kind": "unit_coded", "unit_id": "todo-fe"})
        + "\n" + json.dumps({"ts": "2026-01-01T00:00:00Z", "kind": "note"}) + "\n")
    redis_store.import_project(load_project(todo_project))
    assert redis_store.unit_sink(PID, "bugs", "todo-fe").lines() == lines
    assert len(redis_store.unit_sink(PID, "timeline", "todo-fe").lines()) == 1
    assert redis_store.unit_sink(PID, "timeline", "todo-be").lines() == []
