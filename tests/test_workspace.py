"""Workspaces: the view holds only what the role may read; only its write set commits."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from devloop.core.config import Settings
from devloop.project.load import load_project
from devloop.roles.checks import violation_problems
from devloop.roles.workspace import Workspace
from devloop.sandbox import make_sandbox
from devloop.store import RedisStore
from tests.plant import MONEY, plant_git, plant_pyc


@pytest.fixture
def store(redis_client: redis.Redis, todo_project: Path) -> RedisStore:
    be = todo_project / "units/todo-be"
    (be / "code").mkdir()
    (be / "code/server.js").write_text("module.exports = 'secret be code';\n")
    (be / "contract.json").write_text('{"unit_id": "todo-be", "version": "v", "exports": {}}')
    store = RedisStore(redis_client)
    store.import_project(load_project(todo_project))
    return store


_made: list[Workspace] = []


@pytest.fixture(autouse=True)
def _remove_views() -> Iterator[None]:
    """Every view a test materialized is removed, whether the test passed or not."""
    yield
    while _made:
        _made.pop().cleanup()


def workspace(store: RedisStore, settings: Settings, role: str, unit: str, attempt: int = 1,
              run_id: str | None = None) -> Workspace:
    ws = Workspace(store, "p-todo", unit, role, attempt, settings=settings, run_id=run_id)
    _made.append(ws)
    ws.materialize()
    return ws


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_view_holds_own_unit_own_section_and_upstream_contract_only(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-fe")
    assert ws.root is not None
    assert files_under(ws.root) == {
        "units.json",
        "sdd/mvcp/todo-fe.html",
        "units/todo-be/contract.json",
        "units/todo-fe/spec.json",
    }
    section = (ws.root / "sdd/mvcp/todo-fe.html").read_text()
    assert 'data-unit-id="todo-fe"' in section and 'data-unit-id="todo-be"' not in section
    assert json.loads((ws.root / "units.json").read_text())["project_id"] == "p-todo"
    ws.cleanup()


def test_coder_changes_in_write_set_commit_and_others_are_violations(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    unit = ws.unit_dir
    (unit / "code/server.js").write_text("module.exports = 'v2';\n")
    (unit / "contract.json").write_text('{"changed": true}')
    (unit / "tests").mkdir()
    (unit / "tests/sneaky.spec.js").write_text("it('always green', () => {})")
    (unit / "spec.json").write_text("{}")
    outcome = ws.commit()
    assert outcome.applied
    assert outcome.committed == ["code/server.js", "contract.json"]
    assert sorted(str(v) for v in outcome.violations) == [
        "units/todo-be/spec.json: outside the coder's write set",
        "units/todo-be/tests/sneaky.spec.js: outside the coder's write set",
    ]
    files = store.unit_files("p-todo", "todo-be").files
    assert files["code/server.js"] == b"module.exports = 'v2';\n"
    assert "tests/sneaky.spec.js" not in files
    assert files["spec.json"] != b"{}"
    ws.cleanup()


def test_artifacts_are_refused_at_commit_named_and_the_source_beside_them_commits(
    store: RedisStore, settings: Settings, tmp_path: Path
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    code = ws.unit_dir / "code"
    (code / "money.py").write_text(MONEY)
    plant_pyc(code)  # compiled from other source, unchecked hash
    plant_git(code, tmp_path / "marker")  # core.fsmonitor runs a command on `git status`
    (code / "fast.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF\2\1\1")
    (code / "trojan.py").write_text('if role != "admin\u202e \u2066":\n    deny()\n')
    (code / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    outcome = ws.commit()
    assert outcome.applied and outcome.committed == ["code/money.py"]
    refused = {v.path: v.reason for v in outcome.violations}
    assert all(v.artifact for v in outcome.violations)
    assert refused == {
        "units/todo-be/code/.git/": "version-control metadata (.git), not source: nothing "
                                    "under it is read or committed; delete it",
        "units/todo-be/code/__pycache__/": "a bytecode cache (__pycache__), not source: "
                                           "nothing under it is read or committed; delete it",
        "units/todo-be/code/fast.cpython-311-x86_64-linux-gnu.so":
            "compiled code (.so), not source: not committed; delete it",
        "units/todo-be/code/logo.png": "a binary file (16 bytes, NUL bytes among them): "
            "code/ and tests/ hold source text only; remove it; not committed",
        "units/todo-be/code/trojan.py": "holds the bidi control U+202E on line 1 (Trojan "
            "Source: it reorders what a reader sees); write it as an escape (\\u202e) or "
            "remove it; not committed",
    }
    files = store.unit_files("p-todo", "todo-be").files
    assert sorted(rel for rel in files if rel.startswith("code/")) == [
        "code/money.py", "code/server.js"]
    # The coder is told in its self-check (and by sandbox_check), so it fixes it in-session.
    [problem] = violation_problems(ws)
    assert problem.startswith("files that are not source, never committed")
    assert "units/todo-be/code/.git/: version-control metadata (.git)" in problem
    ws.cleanup()


def test_tester_cannot_commit_code(store: RedisStore, settings: Settings) -> None:
    ws = workspace(store, settings, "tester", "todo-be", run_id="run-1")
    (ws.unit_dir / "code/server.js").write_text("module.exports = 'tampered';\n")
    (ws.unit_dir / "tests").mkdir()
    (ws.unit_dir / "tests/a.spec.js").write_text("// test")
    (ws.unit_dir / "runs/run-1").mkdir(parents=True)
    (ws.unit_dir / "runs/run-1/junit.xml").write_text("<testsuites/>")
    (ws.unit_dir / "runs/run-0").mkdir(parents=True)
    (ws.unit_dir / "runs/run-0/result.json").write_text("{}")
    outcome = ws.commit()
    assert outcome.committed == ["runs/run-1/junit.xml", "tests/a.spec.js"]
    assert [v.path for v in outcome.violations] == [
        "units/todo-be/code/server.js",
        "units/todo-be/runs/run-0/result.json",
    ]
    files = store.unit_files("p-todo", "todo-be").files
    assert files["code/server.js"] == b"module.exports = 'secret be code';\n"
    ws.cleanup()


def test_symlink_escape_special_files_and_oversize_are_violations(
    store: RedisStore, settings: Settings, tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host secret")
    small = settings.model_copy(update={"file_cap_bytes": 1000})
    ws = workspace(store, small, "coder", "todo-be")
    code = ws.unit_dir / "code"
    os.symlink(secret, code / "escape.js")
    os.symlink("../../../units.json", code / "inside.js")
    os.mkfifo(code / "pipe")
    (code / "big.js").write_bytes(b"x" * 1001)
    outcome = ws.commit()
    reasons = {v.path: v.reason for v in outcome.violations}
    assert reasons["units/todo-be/code/escape.js"].startswith("symlink points outside the view")
    assert reasons["units/todo-be/code/inside.js"] == "symlink (commit the file itself)"
    assert reasons["units/todo-be/code/pipe"] == "not a regular file (device, fifo or socket)"
    assert reasons["units/todo-be/code/big.js"] == "file of 1001 bytes is over the cap of 1000"
    files = store.unit_files("p-todo", "todo-be").files
    assert not {"code/escape.js", "code/inside.js", "code/pipe", "code/big.js"} & set(files)
    assert b"host secret" not in b"".join(files.values())
    ws.cleanup()


def test_second_commit_of_an_attempt_is_a_no_op_and_stale_views_conflict(
    store: RedisStore, settings: Settings
) -> None:
    first = workspace(store, settings, "coder", "todo-be", attempt=2)
    duplicate = workspace(store, settings, "coder", "todo-be", attempt=2)
    stale = workspace(store, settings, "coder", "todo-be", attempt=3)
    for ws, text in ((first, "a"), (duplicate, "b"), (stale, "c")):
        (ws.unit_dir / "code/server.js").write_text(text)
    assert first.commit().applied
    again = duplicate.commit()
    assert not again.applied and again.reason == "already committed"
    conflict = stale.commit()
    assert not conflict.applied and conflict.reason == "version conflict"
    assert store.unit_files("p-todo", "todo-be").files["code/server.js"] == b"a"


def test_deleting_inside_the_write_set_commits_a_deletion(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    (ws.unit_dir / "code/server.js").unlink()
    (ws.unit_dir / "spec.json").unlink()
    outcome = ws.commit()
    assert outcome.committed == ["code/server.js"]
    assert [str(v) for v in outcome.violations] == [
        "units/todo-be/spec.json: deleted outside the coder's write set"
    ]
    assert "code/server.js" not in store.unit_files("p-todo", "todo-be").files


def test_snapshot_restores_uncommitted_changes_into_a_fresh_view(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    before = ws.fingerprint()
    (ws.unit_dir / "code/new.js").write_text("new")
    assert ws.fingerprint() != before
    snap = ws.snapshot()
    ws.cleanup()
    fresh = workspace(store, settings, "coder", "todo-be")
    fresh.restore(snap)
    assert (fresh.unit_dir / "code/new.js").read_text() == "new"
    assert "code/new.js" in fresh.describe_changes()
    fresh.cleanup()


def test_sandboxed_coder_cannot_reach_tests_or_other_units(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-fe")
    assert ws.root is not None
    sandbox = make_sandbox(settings)
    obs = sandbox.run(
        "echo x > code/a.js; echo y > tests/b.js; echo z > ../todo-be/contract.json; "
        "ls ../todo-be; cat ../todo-be/code/server.js",
        view=ws.root, cwd=ws.unit_rel, writable=ws.writable(),
    )
    assert obs.exit_code != 0
    assert "secret be code" not in obs.stdout
    assert obs.stdout.split() == ["contract.json"]
    outcome = ws.commit()
    assert outcome.committed == ["code/a.js"]
    assert outcome.violations == []  # the sandbox refused the other writes outright
    assert not (ws.unit_dir / "tests/b.js").exists()
    ws.cleanup()


# --- names and shapes a session can leave: violations, never exceptions ----------------


def sandboxed(ws: Workspace, settings: Settings, command: str) -> None:
    """Run command as the session's Bash would: in the unit dir, the write set writable."""
    assert ws.root is not None
    obs = make_sandbox(settings).run(
        command, view=ws.root, cwd=ws.unit_rel, writable=ws.writable(), timeout_s=120
    )
    assert obs.exit_code == 0, obs.stderr


def test_a_name_that_is_not_utf8_is_a_violation_and_the_rest_commits(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    sandboxed(ws, settings, "touch \"code/bad-$(printf '\\377')-name.js\" && echo ok > code/ok.js"
              " && touch \"code/tab$(printf '\\t')name.js\"")
    assert ws.fingerprint()
    assert "refused: units/todo-be/code/bad-\\xff-name.js" in ws.describe_changes()
    outcome = ws.commit()
    assert outcome.committed == ["code/ok.js"]
    assert sorted(map(str, outcome.violations)) == [
        "units/todo-be/code/bad-\\xff-name.js: name is not valid UTF-8",
        "units/todo-be/code/tab\\tname.js: name contains control characters",
    ]
    view = ws.root
    ws.cleanup()
    assert view is not None and not view.exists()


def test_a_1100_deep_tree_and_locked_dirs_are_violations_and_the_view_is_removed(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    deep = "/".join(["d"] * 1100)
    sandboxed(ws, settings, f"mkdir -p code/{deep} && echo x > code/{deep}/f.js"
              " && mkdir -p code/locked/in && echo y > code/locked/in/g.js"
              " && chmod 000 code/locked/in && chmod 500 code/locked")
    before = ws.fingerprint()
    assert before == ws.fingerprint()
    outcome = ws.commit()
    assert outcome.applied and outcome.committed == ["code/locked/in/g.js"]
    [violation] = outcome.violations
    assert violation.path == "units/todo-be/code/" + "/".join(["d"] * 31)
    assert violation.reason == "is more than 32 levels deep"
    assert "code/server.js" in store.unit_files("p-todo", "todo-be").files  # not "deleted"
    view = ws.root
    ws.cleanup()
    assert view is not None and not view.exists()


@pytest.mark.timeout(180)
def test_100000_files_are_refused_at_the_cap_and_nothing_is_committed(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    sandboxed(ws, settings, "echo new > code/server.js && mkdir code/many && cd code/many"
              " && seq 1 100000 | xargs touch")
    before = store.unit_files("p-todo", "todo-be")
    started = time.monotonic()
    outcome = ws.commit()
    fingerprint, snapshot = ws.fingerprint(), ws.snapshot()
    print(f"commit + fingerprint + snapshot of 100,000 files: {time.monotonic() - started:.3f} s")
    assert outcome.committed == [] and snapshot == {} and fingerprint
    assert [str(v) for v in outcome.violations] == [
        "units/todo-be: holds more than 2000 files and directories (DEVLOOP_UNIT_MAX_FILES): "
        "nothing of it was read or committed"
    ]
    assert store.unit_files("p-todo", "todo-be").files == before.files
    view = ws.root
    ws.cleanup()
    assert view is not None and not view.exists()


# --- files only their tools write: judged against the tool's record, which is committed --


def test_a_change_to_a_tool_owned_file_is_a_violation_and_the_tools_copy_commits(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "tester", "todo-be", run_id="run-1-1")
    runs = ws.unit_dir / "runs/run-1-1"
    runs.mkdir(parents=True)
    red = b'{"ok": false}'
    (runs / "result.json").write_bytes(red)
    ws.owned.wrote("runs/run-1-1/result.json", red)  # what run_tests does
    (runs / "result.json").write_text('{"ok": true}')  # the session's forgery
    (runs / "stdout.txt").write_text("made up")  # before run_tests ever wrote it
    (runs / "junit.xml").write_text("<testsuites/>")  # the runner's scratch: no record
    outcome = ws.commit()
    assert outcome.committed == ["runs/run-1-1/junit.xml", "runs/run-1-1/result.json"]
    assert [str(v) for v in outcome.violations] == [
        "units/todo-be/runs/run-1-1/result.json: written by run_tests; the session changed "
        "it and the change was discarded (improve a hint with set_hint)",
        "units/todo-be/runs/run-1-1/stdout.txt: written only by run_tests; the session's "
        "file was discarded (run_tests writes it)",
    ]
    files = store.unit_files("p-todo", "todo-be").files
    assert files["runs/run-1-1/result.json"] == red and "runs/run-1-1/stdout.txt" not in files


def test_a_deleted_or_linked_coder_log_commits_the_tools_copy(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    log = ws.unit_dir / "coder.log"
    log.write_bytes(b"---\nattempt: 1\n---\n")
    ws.owned.wrote("coder.log", b"---\nattempt: 1\n---\n")
    log.unlink()
    assert [v.reason.split(";")[1] for v in ws.collect().violations] == [
        " the session deleted it and the change was discarded (add your decision with "
        "append_coder_log)"
    ]
    os.symlink("../../units.json", log)
    changes = ws.collect()
    assert changes.files == {"coder.log": b"---\nattempt: 1\n---\n"}
    assert [v.owner for v in changes.violations] == ["append_coder_log"]


def test_a_checkpoint_keeps_the_tools_copy_and_a_resumed_view_rebuilds_its_records(
    store: RedisStore, settings: Settings
) -> None:
    ws = workspace(store, settings, "coder", "todo-be")
    tool = b"---\nattempt: 1\nthis_fix: x\n---\n"
    (ws.unit_dir / "coder.log").write_bytes(tool)
    ws.owned.wrote("coder.log", tool)
    (ws.unit_dir / "coder.log").write_text("forged")
    snapshot = ws.snapshot()  # a forgery is never what a checkpoint holds
    assert json.dumps(snapshot).count("forged") == 0
    resumed = workspace(store, settings, "coder", "todo-be")
    resumed.restore(snapshot)
    record = resumed.owned.get("coder.log")
    assert record is not None and record.data == tool
    assert (resumed.unit_dir / "coder.log").read_bytes() == tool
    assert resumed.collect().violations == []
    # Going back to a best state keeps coder.log as the tool last wrote it.
    (resumed.unit_dir / "code/server.js").write_text("module.exports = 'later';\n")
    later = tool + b"---\nattempt: 1\nthis_fix: y\n---\n"
    (resumed.unit_dir / "coder.log").write_bytes(later)
    resumed.owned.wrote("coder.log", later)
    resumed.revert_to({})
    assert (resumed.unit_dir / "coder.log").read_bytes() == later
    code = (resumed.unit_dir / "code/server.js").read_text()
    assert code == "module.exports = 'secret be code';\n"
