"""Importing a project folder: everything lands, nothing twice, nothing half, caps enforced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from devloop.core.errors import FileTooLarge, ProjectInvalid
from devloop.project.load import load_project
from devloop.store import RedisStore
from tests.plant import plant_git

PID = "p-todo"


def seed(root: Path) -> None:
    """Give the todo copy code, a log, ledgers, memory, agent state and conventions."""
    (root / "units/todo-be/code").mkdir(parents=True)
    (root / "units/todo-be/code/server.js").write_text("module.exports = {}\n")
    # Bytes of any kind round-trip; a binary beside the code, not in it (code/ is source).
    (root / "units/todo-be/design").mkdir(parents=True)
    (root / "units/todo-be/design/blob.bin").write_bytes(bytes(range(256)))
    (root / "units/todo-be/coder.log").write_text("---\nattempt: 1\n---\n")
    (root / "bugs.ndjson").write_text('{"event":"bug_open","id":"B1"}\n')
    (root / "timeline.ndjson").write_text('{"kind":"unit_coded"}\n{"kind":"unit_tested"}\n')
    (root / "memory/devloop/coder").mkdir(parents=True)
    (root / "memory/devloop/coder/express.md").write_text("Use express.Router.\n")
    (root / "agent-state/coder").mkdir(parents=True)
    (root / "agent-state/coder/todo-be.json").write_text('{"todo": []}\n')
    (root / "conventions.md").write_text("Two-space indents.\n")


def versions(store: RedisStore) -> dict[str, int]:
    return {u: store.unit_files(PID, u).version for u in ("todo-be", "todo-fe")}


def test_import_stores_the_whole_project(redis_store: RedisStore, todo_project: Path) -> None:
    seed(todo_project)
    report = redis_store.import_project(load_project(todo_project))
    assert (report.pid, report.units, report.files, report.changed) == (PID, 3, 6, True)

    record = redis_store.project_record(PID)
    assert [u.id for u in record.units.units] == ["todo-be", "todo-fe", "todo-app"]
    assert (record.company_id, record.stack) == ("c-demo", "node")
    assert record.conventions == "Two-space indents.\n"
    doc = redis_store.sdd_document(PID, "todo-be")
    assert doc is not None and 'data-unit-id="todo-be"' in doc and "todo-fe" not in doc
    spec = redis_store.unit_spec(PID, "todo-fe")
    assert spec is not None and spec.depends_on == ["todo-be"]
    assert "exports" in (redis_store.sdd_contract(PID, "todo-be") or {})

    be = redis_store.unit_files(PID, "todo-be")
    assert be.version == 1
    assert set(be.files) == {"spec.json", "code/server.js", "design/blob.bin", "coder.log"}
    assert be.files["design/blob.bin"] == bytes(range(256))
    assert redis_store.sink(PID, "timeline").lines() == [
        '{"kind":"unit_coded"}',
        '{"kind":"unit_tested"}',
    ]
    assert redis_store.sink(PID, "bugs").lines() == ['{"event":"bug_open","id":"B1"}']
    assert redis_store.memory_notes(PID, "coder") == {"express.md": "Use express.Router.\n"}
    assert redis_store.agent_state(PID) == {"coder/todo-be.json": b'{"todo": []}\n'}


def test_reimporting_an_unchanged_project_changes_nothing(
    redis_store: RedisStore, todo_project: Path
) -> None:
    seed(todo_project)
    redis_store.import_project(load_project(todo_project))
    before = versions(redis_store)
    again = redis_store.import_project(load_project(todo_project))
    assert again.changed is False and again.changed_units == []
    assert versions(redis_store) == before
    assert len(redis_store.sink(PID, "timeline").lines()) == 2
    assert len(redis_store.sink(PID, "bugs").lines()) == 1


def test_a_changed_file_bumps_only_its_unit(redis_store: RedisStore, todo_project: Path) -> None:
    seed(todo_project)
    redis_store.import_project(load_project(todo_project))
    (todo_project / "units/todo-be/code/server.js").write_text("module.exports = 1\n")
    with (todo_project / "timeline.ndjson").open("a") as f:
        f.write('{"kind":"code_patched"}\n')
    report = redis_store.import_project(load_project(todo_project))
    assert report.changed and report.changed_units == ["todo-be"]
    assert versions(redis_store) == {"todo-be": 2, "todo-fe": 1}
    assert redis_store.unit_files(PID, "todo-be").files["code/server.js"] == b"module.exports = 1\n"
    assert redis_store.sink(PID, "timeline").lines()[-1] == '{"kind":"code_patched"}'
    assert len(redis_store.sink(PID, "timeline").lines()) == 3


def test_reimport_keeps_commits_made_since_the_last_import(
    redis_store: RedisStore, todo_project: Path
) -> None:
    seed(todo_project)
    project = load_project(todo_project)
    redis_store.import_project(project)
    done = redis_store.commit_files(
        PID, "todo-be", role="coder", attempt=1, base_version=1, changes={"code/x.js": b"1"}
    )
    assert done.applied
    assert redis_store.import_project(project).changed is False
    assert redis_store.unit_files(PID, "todo-be").files["code/x.js"] == b"1"


def test_a_derived_spec_becomes_a_unit_file(redis_store: RedisStore, todo_project: Path) -> None:
    (todo_project / "units/todo-fe/spec.json").unlink()
    project = load_project(todo_project)
    assert "todo-fe" in project.derived_specs
    redis_store.import_project(project)
    spec = json.loads(redis_store.unit_files(PID, "todo-fe").files["spec.json"])
    assert spec["unit_id"] == "todo-fe" and spec["acceptance_criteria"]
    assert redis_store.import_project(load_project(todo_project)).changed is False


def test_a_unit_past_the_cap_is_refused_and_nothing_is_written(
    redis_client: redis.Redis, todo_project: Path
) -> None:
    seed(todo_project)
    (todo_project / "units/todo-fe/big.bin").write_bytes(b"x" * 5000)
    store = RedisStore(redis_client, file_cap_bytes=4096)
    with pytest.raises(FileTooLarge) as caught:
        store.import_project(load_project(todo_project))
    message = str(caught.value)
    assert '"todo-fe"' in message and "4096" in message and "DEVLOOP_FILE_CAP_BYTES" in message
    assert "big.bin" in message
    assert list(redis_client.scan_iter(match=f"devloop:{PID}:*")) == []


def test_delete_project_removes_every_key(redis_store: RedisStore, todo_project: Path) -> None:
    seed(todo_project)
    redis_store.import_project(load_project(todo_project))
    redis_store.client.set("devloop:other:project", "kept")
    assert redis_store.delete_project(PID) > 0
    assert not redis_store.has_project(PID)
    assert redis_store.client.keys("*") == [b"devloop:other:project"]


def test_a_folder_behind_redis_never_puts_an_older_agent_state_back(
    redis_store: RedisStore, todo_project: Path
) -> None:
    """A run stopped between two exports left the folder's todolist older than Redis's;
    the next run's import must not hand the resumed session the old plan."""
    seed(todo_project)
    redis_store.import_project(load_project(todo_project))
    newer = b'{"todo": ["BASELINE: 0/1 passed"]}\n'
    redis_store.put_agent_state(PID, "coder/todo-be.json", newer)
    (todo_project / "agent-state/coder/new.json").write_text("{}\n")
    redis_store.import_project(load_project(todo_project))
    assert redis_store.agent_state(PID) == {
        "coder/todo-be.json": newer,  # Redis's, not the folder's older copy
        "coder/new.json": b"{}\n",  # what only the folder had is added
    }


def test_a_folder_with_unfit_source_is_refused_before_any_write(
    redis_store: RedisStore, todo_project: Path
) -> None:
    code = todo_project / "units/todo-be/code"
    code.mkdir(parents=True)
    (code / "auth.js").write_text('const ok = "\u2067x";\n')
    with pytest.raises(ProjectInvalid) as refused:
        redis_store.import_project(load_project(todo_project))
    assert [str(p) for p in refused.value.problems] == [
        "units/todo-be/code/auth.js: content: holds the bidi control U+2067 on line 1 (Trojan "
        "Source: it reorders what a reader sees); fix: write it as an escape (\\u2067) or "
        "remove it"]
    assert redis_store.client.keys(f"devloop:{PID}:*") == []


def test_an_artifact_stored_before_the_rule_is_never_written_back_nor_one_read_in(
    redis_store: RedisStore, todo_project: Path, tmp_path: Path
) -> None:
    code = todo_project / "units/todo-be/code"
    code.mkdir(parents=True)
    (code / "server.js").write_text("module.exports = {}\n")
    redis_store.import_project(load_project(todo_project))
    version = redis_store.unit_files(PID, "todo-be").version
    planted = {"code/.git/config": b"[core]\n\tfsmonitor = touch /tmp/x\n"}
    assert redis_store.commit_files(PID, "todo-be", role="coder", attempt=1,
                                    base_version=version, changes=planted).applied
    written = redis_store.export(PID, todo_project, as_source=True)
    assert not (code / ".git").exists() and written == []  # never written back
    plant_git(code, tmp_path / "marker")  # the user's own folder: left as it is, not read
    report = redis_store.import_project(load_project(todo_project))
    assert report.dropped == ["units/todo-be/code/.git/: version-control metadata (.git), "
                              "not source"]
    assert redis_store.unit_files(PID, "todo-be").files["code/.git/config"] == planted[
        "code/.git/config"]  # what the folder holds there was never read
