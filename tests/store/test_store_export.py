"""Export: the seed layout back on disk, atomically, rewriting only what changed."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from devloop.project.load import load_project
from devloop.safe.safedir import Dir
from devloop.server.redis_server import RedisServer
from devloop.store import ProjectNotImported, RedisStore, UnsafePath
from devloop.store.export import write_atomic

PID = "p-todo"


def imported(store: RedisStore, root: Path) -> None:
    """Seed some files into the todo copy and import it."""
    (root / "units/todo-be/code").mkdir(parents=True)
    (root / "units/todo-be/code/server.js").write_text("v1\n")
    (root / "units/todo-be/code/keep.js").write_text("same\n")
    (root / "timeline.ndjson").write_text('{"kind":"unit_coded"}\n')
    (root / "memory/devloop/tester").mkdir(parents=True)
    (root / "memory/devloop/tester/vitest.md").write_text("Use --reporter=json.\n")
    (root / "agent-state").mkdir()
    (root / "agent-state/todo.json").write_text("[]\n")
    store.import_project(load_project(root))


def stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def test_round_trip_writes_changes_and_leaves_the_rest(
    redis_store: RedisStore, todo_project: Path, tmp_path: Path
) -> None:
    imported(redis_store, todo_project)
    redis_store.commit_files(
        PID,
        "todo-be",
        role="coder",
        attempt=1,
        base_version=1,
        changes={"code/server.js": b"v2\n", "contract.json": b"{}\n"},
    )
    redis_store.sink(PID, "bugs").append('{"event":"bug_open","id":"B1"}')
    before = {p: stamp(p) for p in todo_project.rglob("*") if p.is_file()}

    written = redis_store.export(PID, todo_project)

    root = todo_project.resolve()
    assert sorted(written) == sorted(
        [
            root / "units/todo-be/code/server.js",
            root / "units/todo-be/contract.json",
            root / "bugs.ndjson",
        ]
    )
    assert (todo_project / "units/todo-be/code/server.js").read_text() == "v2\n"
    assert (todo_project / "bugs.ndjson").read_text() == '{"event":"bug_open","id":"B1"}\n'
    for path in ("units/todo-be/code/keep.js", "timeline.ndjson", "units/todo-fe/spec.json"):
        assert stamp(todo_project / path) == before[todo_project / path], path
    assert redis_store.export(PID, todo_project) == []


def test_export_to_a_new_dir_gives_the_seed_layout(
    redis_store: RedisStore, todo_project: Path, tmp_path: Path
) -> None:
    imported(redis_store, todo_project)
    dest = tmp_path / "out"
    written = redis_store.export(PID, dest)
    rel = sorted(p.relative_to(dest.resolve()).as_posix() for p in written)
    assert rel == [
        "agent-state/todo.json",
        "memory/devloop/tester/vitest.md",
        "timeline.ndjson",
        "units/todo-app/spec.json",
        "units/todo-be/code/keep.js",
        "units/todo-be/code/server.js",
        "units/todo-be/spec.json",
        "units/todo-fe/spec.json",
    ]
    for name in rel:
        assert (dest / name).read_bytes() == (todo_project / name).read_bytes(), name
    assert not [p for p in dest.rglob("*") if p.name.endswith(".tmp")]


def test_exported_project_reimports_unchanged(
    redis_store: RedisStore, todo_project: Path, tmp_path: Path
) -> None:
    imported(redis_store, todo_project)
    dest = tmp_path / "copy"
    shutil.copytree(todo_project, dest)
    redis_store.export(PID, dest)
    assert redis_store.import_project(load_project(dest)).changed is False


def test_write_atomic_leaves_no_temp_file_and_keeps_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "a" / "run.sh"
    with Dir.open(tmp_path) as root:
        assert write_atomic(root, "a/run.sh", b"#!/bin/sh\n")
        os.chmod(path, 0o755)
        assert write_atomic(root, "a/run.sh", b"#!/bin/sh\necho\n")
        assert path.stat().st_mode & 0o777 == 0o755
        assert not write_atomic(root, "a/run.sh", b"#!/bin/sh\necho\n")
    assert [p.name for p in path.parent.iterdir()] == ["run.sh"]


def test_export_refuses_a_symlink_that_leads_outside(
    redis_store: RedisStore, todo_project: Path, tmp_path: Path
) -> None:
    imported(redis_store, todo_project)
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    (dest / "units").mkdir(parents=True)
    (dest / "units/todo-be").symlink_to(outside)
    with pytest.raises(UnsafePath):
        redis_store.export(PID, dest)
    assert list(outside.iterdir()) == []


def test_export_of_an_unknown_project_says_so(redis_store: RedisStore, tmp_path: Path) -> None:
    with pytest.raises(ProjectNotImported, match="nope"):
        redis_store.export("nope", tmp_path)


@pytest.mark.parametrize("plant", ["file link", "dir link", "fifo"])
def test_export_writes_nothing_through_a_link_or_onto_a_fifo_in_the_project(
    redis_store: RedisStore, todo_project: Path, tmp_path: Path, plant: str
) -> None:
    imported(redis_store, todo_project)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "server.js").write_text("host file\n")
    dest = tmp_path / "dest"
    (dest / "units/todo-be/code").mkdir(parents=True)
    target = dest / "units/todo-be/code/server.js"
    if plant == "file link":
        target.symlink_to(outside / "server.js")
    elif plant == "dir link":
        (dest / "agent-state").symlink_to(outside)
    else:
        os.mkfifo(target)
    before = sorted(dest.rglob("*"))
    with pytest.raises(UnsafePath, match="remove"):
        redis_store.export(PID, dest)
    assert sorted(p.name for p in outside.iterdir()) == ["server.js"]
    assert (outside / "server.js").read_text() == "host file\n"
    assert sorted(dest.rglob("*")) == before  # refused before any write


def commit(store: RedisStore, attempt: int, changes: dict[str, bytes | None]) -> None:
    version = store.unit_files(PID, "todo-be").version
    result = store.commit_files(PID, "todo-be", role="coder", attempt=attempt,
                                base_version=version, changes=changes)
    assert result.applied


def test_a_resumed_run_keeps_commits_made_after_an_export_and_a_no_op_import(
    redis_store: RedisStore, todo_project: Path
) -> None:
    # The path of a `devloop run` resumed after Ctrl-C: export, import (nothing new on
    # disk), a commit, then the next import must not put the older folder back.
    imported(redis_store, todo_project)
    commit(redis_store, 1, {"code/server.js": b"v2\n"})
    redis_store.export(PID, todo_project, as_source=True)
    assert not redis_store.import_project(load_project(todo_project)).changed
    commit(redis_store, 2, {"code/later.js": b"committed after the export\n"})
    again = redis_store.import_project(load_project(todo_project))
    files = redis_store.unit_files(PID, "todo-be").files
    assert not again.changed
    assert files["code/later.js"] == b"committed after the export\n"
    assert files["code/server.js"] == b"v2\n"


def test_a_folder_that_caught_up_by_hand_is_known_as_imported(
    redis_store: RedisStore, todo_project: Path, tmp_path: Path
) -> None:
    imported(redis_store, todo_project)
    commit(redis_store, 1, {"code/server.js": b"v2\n"})
    redis_store.export(PID, tmp_path / "copy")  # a pull elsewhere, not the source folder
    (todo_project / "units/todo-be/code/server.js").write_text("v2\n")  # copied by hand
    assert not redis_store.import_project(load_project(todo_project)).changed
    commit(redis_store, 2, {"code/later.js": b"x\n"})
    redis_store.import_project(load_project(todo_project))
    assert redis_store.unit_files(PID, "todo-be").files["code/later.js"] == b"x\n"


def test_an_export_to_the_source_folder_mirrors_deletions_and_a_pull_does_not(
    redis_store: RedisStore, todo_project: Path, tmp_path: Path
) -> None:
    imported(redis_store, todo_project)
    commit(redis_store, 1, {"code/keep.js": None})
    pulled = tmp_path / "pulled"
    shutil.copytree(todo_project, pulled)
    redis_store.export(PID, pulled)
    assert (pulled / "units/todo-be/code/keep.js").exists()
    redis_store.export(PID, todo_project, as_source=True)
    assert not (todo_project / "units/todo-be/code/keep.js").exists()
    assert (todo_project / "units/todo-be/code/server.js").read_text() == "v1\n"


def test_a_file_the_user_adds_while_a_run_exports_is_kept_and_imported_next(
    redis_store: RedisStore, todo_project: Path
) -> None:
    imported(redis_store, todo_project)
    redis_store.export(PID, todo_project, as_source=True)
    mine = todo_project / "units/todo-be/code/mine.js"
    mine.write_text("the user's, written during the run\n")
    commit(redis_store, 1, {"code/server.js": b"v2\n"})
    redis_store.export(PID, todo_project, as_source=True)
    assert mine.read_text() == "the user's, written during the run\n"
    assert redis_store.import_project(load_project(todo_project)).changed
    files = redis_store.unit_files(PID, "todo-be").files
    assert files["code/mine.js"] == b"the user's, written during the run\n"
    assert files["code/server.js"] == b"v2\n"


def test_a_users_edit_of_a_folder_behind_redis_keeps_the_commits_made_since(
    redis_store: RedisStore, todo_project: Path
) -> None:
    imported(redis_store, todo_project)
    redis_store.export(PID, todo_project, as_source=True)
    commit(redis_store, 1, {"code/later.js": b"committed, not exported yet\n"})
    (todo_project / "units/todo-be/code/server.js").write_text("edited by hand\n")
    (todo_project / "units/todo-be/code/keep.js").unlink()
    assert redis_store.import_project(load_project(todo_project)).changed_units == ["todo-be"]
    files = redis_store.unit_files(PID, "todo-be").files
    assert files["code/server.js"] == b"edited by hand\n"
    assert files["code/later.js"] == b"committed, not exported yet\n"
    assert "code/keep.js" not in files


def test_a_killed_writers_temp_file_is_never_imported_and_the_next_export_tidies_it(
    redis_store: RedisStore, todo_project: Path
) -> None:
    imported(redis_store, todo_project)
    litter = todo_project / "units/todo-be/code/.server.js.0123456789abcdef.tmp"
    litter.write_text("half a file\n")
    assert not redis_store.import_project(load_project(todo_project)).changed
    assert "code/.server.js.0123456789abcdef.tmp" not in redis_store.unit_files(
        PID, "todo-be").files
    redis_store.export(PID, todo_project, as_source=True)
    assert not litter.exists()


KILLED_EXPORTER = """
import os, sys
from pathlib import Path
from devloop.server.redis_server import connect
from devloop.store import RedisStore
store = RedisStore(connect(sys.argv[1]))
os.write(1, b"go\\n")
store.export(sys.argv[2], Path(sys.argv[3]), as_source=True)
os.write(1, b"done\\n")
"""


@pytest.mark.timeout(120)
def test_an_export_killed_at_any_point_loses_no_committed_file(
    redis_store: RedisStore, redis_server: RedisServer, todo_project: Path
) -> None:
    # Many files, so a kill lands mid-export; each round commits a new version of all of
    # them (and deletes some), kills an export of it somewhere, then imports the folder.
    imported(redis_store, todo_project)
    names = [f"code/m{i:03}.js" for i in range(150)]
    torn = 0
    for round_ in range(1, 13):
        changes: dict[str, bytes | None] = {n: f"{n} v{round_}\n".encode() for n in names}
        changes.update({n: None for n in names[round_ * 7 : round_ * 7 + 5]})
        commit(redis_store, round_, changes)
        expected = redis_store.unit_files(PID, "todo-be").files
        before = sorted((todo_project / "units/todo-be/code").iterdir())
        proc = subprocess.Popen([sys.executable, "-c", KILLED_EXPORTER, redis_server.url, PID,
                                 str(todo_project)], stdout=subprocess.PIPE)
        try:
            assert proc.stdout is not None and proc.stdout.readline() == b"go\n"
            time.sleep(random.Random(round_).uniform(0.0, 0.25))
            proc.kill()
        finally:
            proc.wait(timeout=30)
        after = sorted((todo_project / "units/todo-be/code").iterdir())
        on_disk = {p.name: p.read_bytes() for p in after if not p.name.startswith(".")}
        if after != before and on_disk != {k[5:]: v for k, v in expected.items()
                                           if k.startswith("code/")}:
            torn += 1
        report = redis_store.import_project(load_project(todo_project))
        assert not report.changed, f"round {round_}: a torn folder was read as an edit"
        assert redis_store.unit_files(PID, "todo-be").files == expected
    redis_store.export(PID, todo_project, as_source=True)
    assert not redis_store.import_project(load_project(todo_project)).changed
    assert torn >= 2, "too few kills landed mid-export for this test to mean anything"


def test_a_pull_into_the_folder_beside_a_running_export_loses_nothing(
    redis_store: RedisStore, todo_project: Path
) -> None:
    imported(redis_store, todo_project)
    failures: list[BaseException] = []

    def pulls() -> None:
        try:
            for _ in range(30):
                redis_store.export(PID, todo_project)  # as `devloop pull ID DIR` does
        except BaseException as exc:  # noqa: BLE001  reported by the main thread
            failures.append(exc)

    puller = threading.Thread(target=pulls)
    puller.start()
    try:
        for attempt in range(1, 31):
            commit(redis_store, attempt, {f"code/f{attempt % 4}.js": f"v{attempt}\n".encode(),
                                          f"code/f{(attempt + 2) % 4}.js": None})
            redis_store.export(PID, todo_project, as_source=True)
    finally:
        puller.join(timeout=60)
    assert failures == []
    expected = redis_store.unit_files(PID, "todo-be").files
    redis_store.export(PID, todo_project, as_source=True)
    assert not redis_store.import_project(load_project(todo_project)).changed
    assert redis_store.unit_files(PID, "todo-be").files == expected


def test_an_export_of_some_units_writes_only_their_files(
    redis_store: RedisStore, todo_project: Path
) -> None:
    # What `devloop run` does as a unit's files move: the other units' folders, the
    # ledgers and the agent state are left as they are (a whole export would write them).
    imported(redis_store, todo_project)
    redis_store.export(PID, todo_project, as_source=True)
    commit(redis_store, 1, {"code/server.js": b"v2\n"})
    fe = redis_store.unit_files(PID, "todo-fe")
    assert redis_store.commit_files(PID, "todo-fe", role="coder", attempt=1,
                                    base_version=fe.version,
                                    changes={"code/app.js": b"fe v2\n"}).applied
    redis_store.sink(PID, "timeline").append('{"kind":"unit_tested"}')
    (todo_project / "agent-state/todo.json").write_text("edited\n")
    written = redis_store.export(PID, todo_project, as_source=True, units=["todo-be"])
    assert written == [todo_project.resolve() / "units/todo-be/code/server.js"]
    assert (todo_project / "units/todo-be/code/server.js").read_text() == "v2\n"
    assert not (todo_project / "units/todo-fe/code/app.js").exists()
    assert (todo_project / "timeline.ndjson").read_text() == '{"kind":"unit_coded"}\n'
    assert (todo_project / "agent-state/todo.json").read_text() == "edited\n"
    # What the folder is known to hold moved for the unit exported: no edit is seen.
    assert redis_store.import_project(load_project(todo_project)).changed_units == []
