"""A session's start reads its unit, the project around it and its checkpoint together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devloop.project.load import load_project
from devloop.store import ProjectNotImported, RedisStore


def test_a_unit_source_holds_what_the_view_and_prompt_need(
    redis_store: RedisStore, todo_project: Path
) -> None:
    redis_store.import_project(load_project(todo_project))
    pid = "p-todo"
    fe = redis_store.unit_source(pid, "todo-fe", "coder")
    assert fe.record == redis_store.project_record(pid)
    assert fe.spec == redis_store.unit_spec(pid, "todo-fe")
    assert fe.sdd_section == redis_store.sdd_document(pid, "todo-fe")
    assert fe.sdd_contract == redis_store.sdd_contract(pid, "todo-fe")
    assert fe.files == redis_store.unit_files(pid, "todo-fe")
    assert fe.upstream == {} and fe.checkpoint is None  # todo-be has no contract.json yet

    base = redis_store.unit_versions(pid, ["todo-be"])["todo-be"]
    assert redis_store.commit_files(
        pid, "todo-be", role="coder", attempt=1, base_version=base,
        changes={"contract.json": b'{"unit_id": "todo-be"}', "code/app.js": b"x"},
    ).applied
    redis_store.save_session(pid, "coder", "todo-fe", {"attempt": 1, "finished": False})
    fe = redis_store.unit_source(pid, "todo-fe", "coder")
    # Only the dependency's contract, never its code; and only the asked role's checkpoint.
    assert fe.upstream == {"todo-be": b'{"unit_id": "todo-be"}'}
    assert fe.checkpoint == {"attempt": 1, "finished": False}
    assert redis_store.unit_source(pid, "todo-fe", "tester").checkpoint is None
    assert redis_store.unit_source(pid, "todo-fe").checkpoint is None


def test_an_unknown_unit_or_project_is_an_error(
    redis_store: RedisStore, todo_project: Path
) -> None:
    with pytest.raises(ProjectNotImported):
        redis_store.unit_source("p-none", "todo-fe")
    redis_store.import_project(load_project(todo_project))
    with pytest.raises(KeyError, match="nope"):
        redis_store.unit_source("p-todo", "nope")


def test_the_parsed_units_are_reused_until_units_json_changes(
    redis_store: RedisStore, todo_project: Path
) -> None:
    redis_store.import_project(load_project(todo_project))
    first = redis_store.project_record("p-todo")
    assert redis_store.project_record("p-todo").units is first.units
    assert first.units_text == (todo_project / "units.json").read_text().rstrip("\n")

    units = json.loads((todo_project / "units.json").read_text())
    units["units"][1]["depends_on"] = []
    (todo_project / "units.json").write_text(json.dumps(units, indent=2) + "\n")
    redis_store.import_project(load_project(todo_project))
    again = redis_store.project_record("p-todo")
    assert again.units is not first.units
    assert again.units.unit("todo-fe").depends_on == []  # type: ignore[union-attr]
    assert '"depends_on": []' in again.units_text
