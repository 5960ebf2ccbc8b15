"""The folder of a running project: written as its units move, only where they moved."""

from __future__ import annotations

import json
import time
from pathlib import Path

from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.livestatus import LiveStatus
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import STEPS_FILE, StepRecord, save_step
from devloop.fleet.sync import FolderSync
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build


def commit(store: RedisStore, pid: str, unit: str, attempt: int, text: str) -> None:
    version = store.unit_files(pid, unit).version
    assert store.commit_files(pid, unit, role="coder", attempt=attempt, base_version=version,
                              changes={"code/unit.py": text.encode()}).applied


def finish_step(store: RedisStore, pid: str, unit: str, attempt: int) -> None:
    """A coder step's end: its record, then the unit's state moves (an event)."""
    now = time.time()
    save_step(store, pid, unit, StepRecord(
        role="coder", attempt=attempt, msg=StepMsg(pid=pid, unit_id=unit, attempt=attempt),
        worker="w1", started_at=now - 1, ended_at=now, tokens=10))
    store.put_state(pid, unit, UnitState(status="testing", attempt=attempt))


def test_a_sync_writes_the_units_that_moved_and_appends_their_records(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    folder = build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b"), UnitPlan("c")])
    pid = enqueue_project(redis_store, folder)[0].pid
    for unit in ("a", "b"):
        commit(redis_store, pid, unit, 1, f"# {unit} v1\n")
        finish_step(redis_store, pid, unit, 1)
    live = LiveStatus(redis_store, pid, sweep_s=3600)
    sync = FolderSync(redis_store, pid, folder)
    live.load()
    sync.start(live)
    assert (folder / "units/a/code/unit.py").read_text() == "# a v1\n"
    steps = folder / STEPS_FILE
    assert len(steps.read_text().splitlines()) == 2
    inode = steps.stat().st_ino
    # A person edits b's code in the folder while the run goes on; a moves on.
    (folder / "units/b/code/unit.py").write_text("# b, edited by hand\n")
    commit(redis_store, pid, "a", 2, "# a v2\n")
    redis_store.put_agent_state(pid, "coder-a-todo.json", b'[{"id": "step-001"}]')
    finish_step(redis_store, pid, "a", 2)
    sync.sync(live, live.poll())
    assert (folder / "units/a/code/unit.py").read_text() == "# a v2\n"
    assert (folder / "agent-state/coder-a-todo.json").read_text() == '[{"id": "step-001"}]'
    # b did not move: its folder is not written (a whole export would put v1 back).
    assert (folder / "units/b/code/unit.py").read_text() == "# b, edited by hand\n"
    lines = [json.loads(line) for line in steps.read_text().splitlines()]
    assert [(r["msg"]["unit_id"], r["attempt"]) for r in lines] == [("a", 1), ("b", 1), ("a", 2)]
    assert steps.stat().st_ino == inode  # appended to, not written again
    sync.finish(every_run_scripted=False)
    assert len(steps.read_text().splitlines()) == 3
    spend = json.loads((folder / "agent-state/spend.json").read_text())
    assert spend["spent_usd"] == 0.0
