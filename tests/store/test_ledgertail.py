"""A run's ledger files grow by what is new in their streams; written whole only when they
are not as the last sync left them."""

from __future__ import annotations

import json
from pathlib import Path

from devloop.project.load import load_project
from devloop.store import RedisStore
from devloop.store.ledgertail import follow_ledgers

PID = "p-todo"


def event(n: int) -> str:
    return json.dumps({"kind": "unit_tested", "unit_id": "todo-be", "summary": f"run {n}"})


def whole(store: RedisStore, name: str) -> str:
    """The file as a whole export writes it."""
    return "".join(line + "\n" for line in store.sink(PID, name).lines())  # type: ignore[arg-type]


def test_new_entries_are_appended_to_the_file_the_last_sync_left(
    redis_store: RedisStore, todo_project: Path
) -> None:
    redis_store.import_project(load_project(todo_project))
    timeline = redis_store.sink(PID, "timeline")
    timeline.append(event(1))
    marks = follow_ledgers(redis_store, PID, todo_project)
    path = todo_project / "timeline.ndjson"
    assert path.read_text() == whole(redis_store, "timeline")
    inode = path.stat().st_ino
    timeline.append(event(2))
    redis_store.sink(PID, "bugs").append('{"type":"bug_open","bug_id":"b1"}')
    marks = follow_ledgers(redis_store, PID, todo_project, marks)
    assert path.read_text() == whole(redis_store, "timeline")
    assert path.stat().st_ino == inode  # appended to, not written again
    assert (todo_project / "bugs.ndjson").read_text() == whole(redis_store, "bugs")
    assert follow_ledgers(redis_store, PID, todo_project, marks) == marks  # nothing new


def test_a_file_changed_behind_the_sync_or_a_stream_cut_short_is_written_whole(
    redis_store: RedisStore, todo_project: Path
) -> None:
    redis_store.import_project(load_project(todo_project))
    timeline = redis_store.sink(PID, "timeline")
    timeline.append(event(1))
    marks = follow_ledgers(redis_store, PID, todo_project)
    path = todo_project / "timeline.ndjson"
    path.write_text("a person's edit\n")
    timeline.append(event(2))
    marks = follow_ledgers(redis_store, PID, todo_project, marks)
    assert path.read_text() == whole(redis_store, "timeline")
    # Entries deleted from the stream (a reset): appending would keep them in the file.
    key = redis_store.keys(PID).stream("timeline")
    first = redis_store.client.xrange(key, count=1)[0][0]
    redis_store.client.xdel(key, first)
    timeline.append(event(3))
    follow_ledgers(redis_store, PID, todo_project, marks)
    assert path.read_text() == whole(redis_store, "timeline")
