"""Memory notes: a session's notes wait per (role, unit) until that unit passes, then are
promoted, author named, for every unit; both kinds export to memory/devloop/ and import back."""

from __future__ import annotations

from pathlib import Path

import pytest

from devloop.core.ids import InvalidId
from devloop.project.load import load_project
from devloop.store import RedisStore, promote_memory

PID = "p-todo"
NOTE = "---\ntopic: json bodies\nrelevance: 0.8\n---\nParse bodies with express.json().\n"


@pytest.fixture
def store(redis_store: RedisStore, todo_project: Path) -> RedisStore:
    redis_store.import_project(load_project(todo_project))
    return redis_store


def test_a_pending_note_is_seen_by_its_own_unit_only(store: RedisStore) -> None:
    store.put_pending_note(PID, "coder", "todo-be", "json-bodies", NOTE)
    assert store.memory_notes(PID, "coder") == {}
    assert store.pending_notes(PID, "coder", "todo-be") == {"json-bodies.md": NOTE}
    assert store.pending_notes(PID, "coder", "todo-fe") == {}
    assert store.pending_notes(PID, "tester", "todo-be") == {}


def test_promotion_names_the_author_unit_and_happens_once(store: RedisStore) -> None:
    store.put_pending_note(PID, "coder", "todo-be", "json-bodies", NOTE)
    store.put_pending_note(PID, "tester", "todo-be", "supertest", "plain text note\n")
    store.put_pending_note(PID, "coder", "todo-fe", "vue", "not promoted\n")
    assert promote_memory(store, PID, "todo-be") == [
        "coder/todo-be--json-bodies.md",
        "tester/todo-be--supertest.md",
    ]
    assert store.memory_notes(PID, "coder") == {
        "todo-be--json-bodies.md": "---\nauthor_unit: todo-be\n" + NOTE.removeprefix("---\n")
    }
    assert store.memory_notes(PID, "tester") == {
        "todo-be--supertest.md": "---\nauthor_unit: todo-be\n---\nplain text note\n"
    }
    assert store.pending_notes(PID, "coder", "todo-be") == {}
    assert store.pending_notes(PID, "coder", "todo-fe") == {"vue.md": "not promoted\n"}
    assert promote_memory(store, PID, "todo-be") == []


def test_pending_and_promoted_notes_export_and_import_in_the_memory_folder(
    store: RedisStore, todo_project: Path
) -> None:
    store.put_pending_note(PID, "coder", "todo-fe", "vue", "wait for todo-fe\n")
    store.put_pending_note(PID, "coder", "todo-be", "json-bodies", NOTE)
    promote_memory(store, PID, "todo-be")
    store.export(PID, todo_project)
    memory = todo_project / "memory/devloop/coder"
    assert sorted(p.relative_to(memory).as_posix() for p in memory.rglob("*.md")) == [
        "pending/todo-fe/vue.md",
        "todo-be--json-bodies.md",
    ]
    store.client.flushall()
    store.import_project(load_project(todo_project))
    assert list(store.memory_notes(PID, "coder")) == ["todo-be--json-bodies.md"]
    assert store.pending_notes(PID, "coder", "todo-fe") == {"vue.md": "wait for todo-fe\n"}


def test_a_pending_note_for_a_bad_unit_id_is_refused(store: RedisStore) -> None:
    with pytest.raises(InvalidId):
        store.put_pending_note(PID, "coder", "../todo-be", "x", "note")
