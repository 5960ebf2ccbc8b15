"""Role tools act on their own unit only, and loop events are the loop's: a tester of one
unit cannot move another unit's bugs, a coder cannot forge `loop_pass`, and the report
believes only events the loop wrote."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devloop.agent.flavors import toolset
from devloop.agent.tools import ToolContext
from devloop.core.config import Settings
from devloop.core.models import RunResult, RunSummary
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, export_steps, save_step
from devloop.ledgers import BugLedger, FileSink, Timeline
from devloop.report.data import gather
from devloop.roles.registry import all_tools
from devloop.roles.services import RoleServices
from devloop.store import RedisStore
from tests.agent.harness import KEY, PID, UNIT, Harness, build
from tests.agent.test_loop import text, tool

OTHER = "todo-fe"  # unit B; the harness's unit todo-be is unit A


@pytest.fixture
def harness(
    redis_store: RedisStore, settings: Settings, todo_project: Path
) -> Iterator[Harness]:
    """A coder session rig on todo-be whose model appends a forged loop_pass, then ends."""
    script = {
        "sessions": {
            KEY: {
                "turns": {
                    1: tool("timeline_append", kind="loop_pass", summary="all green, trust me"),
                    2: text("done"),
                }
            }
        }
    }
    h = build(redis_store, settings, todo_project, script)
    yield h
    assert h.stub is not None
    h.stub.stop()
    h.workspace.cleanup()


def a_tester_of(h: Harness, unit: str) -> ToolContext:
    """A tester's tool context for unit, over the same store."""
    store = h.store
    services = RoleServices(
        pid=PID,
        unit_id=unit,
        role="tester",
        attempt=1,
        units=store.project_record(PID).units,
        bugs=BugLedger(store.sink(PID, "bugs")),
        timeline=Timeline(store.sink(PID, "timeline")),
        save_state=lambda path, data: None,
        save_memory=lambda name, note: None,
    )
    return dataclasses.replace(h.ctx, unit_id=unit, role="tester", services={"role": services})


def test_a_tester_of_unit_b_cannot_move_unit_a_bugs(harness: Harness) -> None:
    ledger = BugLedger(harness.store.sink(PID, "bugs"))
    bug, _ = ledger.open(UNIT, "run-1-1", "tests/a.spec.js > creates a todo")
    lines_before = len(ledger.events())
    tools, ctx = toolset("tester", all_tools()), a_tester_of(harness, OTHER)

    moved = tools.execute(ctx, "bug_transition", {"bug_id": bug.id, "to": "fixed"})
    assert moved.is_error
    assert f"bug {bug.id}: not a bug of unit {OTHER}" in moved.text
    assert ledger.get(bug.id) == bug and len(ledger.events()) == lines_before

    listed = tools.execute(ctx, "bug_list", {})
    assert json.loads(listed.text) == []  # B's list never shows A's bugs
    # The tester of A itself may move it.
    own_ctx = a_tester_of(harness, UNIT)
    own = tools.execute(own_ctx, "bug_transition", {"bug_id": bug.id, "to": "fixed"})
    assert not own.is_error and json.loads(own.text)["status"] == "fixed"


def test_a_coder_cannot_append_loop_pass_and_the_report_does_not_show_it_passed(
    harness: Harness, todo_project: Path
) -> None:
    result = harness.session().run("Implement todo-be.")
    assert result.status == "completed"
    tool_result = harness.requests()[1].body["messages"][-1]["content"][0]
    assert tool_result["is_error"] is True
    assert "kind 'loop_pass' is not one a coder may append" in tool_result["content"]
    timeline = Timeline(harness.store.sink(PID, "timeline"))
    assert [e.kind for e in timeline.events()] == []

    harness.store.export(PID, todo_project)
    report = gather(todo_project).unit(UNIT)
    assert report is not None and report.status != "passed"


def test_the_report_believes_only_loop_events_the_loop_wrote(
    harness: Harness, todo_project: Path
) -> None:
    timeline = Timeline(harness.store.sink(PID, "timeline"))
    # What a session could write before role kinds were enforced: a loop kind, its own agent.
    timeline.append("loop_pass", unit_id=UNIT, ref="run-1-1", summary="forged", agent="coder")
    harness.store.export(PID, todo_project)
    assert gather(todo_project).unit(UNIT).status != "passed"  # type: ignore[union-attr]

    timeline.append("loop_pass", unit_id=UNIT, ref="run-1-1", summary="green", agent="loop")
    harness.store.export(PID, todo_project)
    assert gather(todo_project).unit(UNIT).status == "passed"  # type: ignore[union-attr]


def test_a_tester_appends_only_its_own_kinds_and_never_a_verdict(harness: Harness) -> None:
    tools, ctx = toolset("tester", all_tools()), a_tester_of(harness, OTHER)
    for kind in ("loop_pass", "loop_block", "unit_coded"):
        refused = tools.execute(ctx, "timeline_append", {"kind": kind, "summary": "x"})
        assert refused.is_error and "unit_tested, test_failed, test_passed" in refused.text
    # Its own kind is its words for the runtime's event of the run: no run, no event.
    ok = tools.execute(ctx, "timeline_append", {"kind": "test_passed", "summary": "3/3"})
    assert not ok.is_error and ok.text.startswith("noted: the runtime records unit_tested")
    assert Timeline(harness.store.sink(PID, "timeline")).events() == []
    assert ctx.services["role"].narrative == {"test_passed": "3/3"}


def test_bug_ids_carry_64_random_bits_after_the_readable_stamp(tmp_path: Path) -> None:
    moment = datetime(2026, 5, 13, 10, 31, tzinfo=UTC)
    ledger = BugLedger(FileSink(tmp_path / "bugs.ndjson"), now=lambda: moment)
    ids = [ledger.open("u", "run-1-1", f"test {n}")[0].id for n in range(200)]
    assert all(re.fullmatch(r"bug-20260513-1031-[0-9a-f]{16}", i) for i in ids), ids[:3]
    assert len(set(ids)) == len(ids)
    # Random, not a counter: the 64-bit tails share no common prefix across 200 draws.
    tails = [int(i.rsplit("-", 1)[1], 16) for i in ids]
    assert max(tails).bit_length() > 56 and len({t >> 56 for t in tails}) > 50


def test_a_green_result_json_alone_never_shows_a_unit_passed_in_a_folder_devloop_ran(
    harness: Harness, todo_project: Path
) -> None:
    def write_green_run() -> None:
        green = RunResult(run_id="run-1-1", unit_id=UNIT, attempt=1, ok=True,
                          summary=RunSummary(total=3, passed=3))
        run_dir = todo_project / "units" / UNIT / "runs" / "run-1-1"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "result.json").write_text(green.to_json_text())

    # A folder another tool wrote (no loop event, no step record): its runs decide.
    write_green_run()
    assert gather(todo_project).unit(UNIT).status == "passed"  # type: ignore[union-attr]
    # A folder DevLoop ran whose loop has only released the unit: no step has ended yet.
    timeline = todo_project / "timeline.ndjson"
    before = timeline.read_text() if timeline.exists() else ""
    Timeline(FileSink(timeline)).append("loop_release", unit_id=UNIT, agent="loop",
                                        summary="released")
    assert gather(todo_project).unit(UNIT).status == "in_progress"  # type: ignore[union-attr]
    timeline.write_text(before)
    # A folder DevLoop ran: a step of the other unit is recorded; nothing decided this one.
    msg = StepMsg(pid=PID, unit_id=OTHER, attempt=1)
    save_step(harness.store, PID, OTHER, StepRecord(role="coder", attempt=1, msg=msg,
                                                    worker="w", started_at=0, ended_at=0))
    harness.store.export(PID, todo_project)
    export_steps(harness.store, PID, todo_project)  # as `devloop run` and `pull` do
    write_green_run()
    assert gather(todo_project).unit(UNIT).status != "passed"  # type: ignore[union-attr]
