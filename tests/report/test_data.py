"""Gathering a real run's folder: statuses, runs, reflections, steps, bugs, costs."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from devloop.core.errors import ProjectInvalid
from devloop.core.money import to_nano
from devloop.fleet.control import SPEND_FILE
from devloop.fleet.records import STEPS_FILE
from devloop.report import gather
from devloop.report.data import ReportData
from devloop.report.tables import attempts, cost_table
from tests.conftest import EXAMPLES
from tests.growth import LINEAR, per_item_growth
from tests.report.folders import many_units


def test_a_real_run_reads_as_every_unit_passed_with_todo_be_retried(todo_run: Path) -> None:
    data = gather(todo_run)
    assert (data.project_id, data.company_id, data.stack) == ("p-todo", "c-demo", "node")
    assert [(u.id, u.level, u.status, u.attempts) for u in data.units] == [
        ("todo-be", 1, "passed", 2),
        ("todo-fe", 2, "passed", 1),
        ("todo-app", 2, "passed", 1),
    ]
    assert data.ran and data.notes == []


def test_runs_come_in_order_with_the_red_runs_hint(todo_run: Path) -> None:
    be = gather(todo_run).unit("todo-be")
    assert be is not None
    assert [(r.run_id, r.ok) for r in be.runs] == [("run-1-1", False), ("run-2-1", True)]
    (failure,) = be.runs[0].failures
    assert "title_required" in failure.test and (failure.expected, failure.got) == (400, 500)
    assert "400" in failure.hint and failure.bug_id


def test_reflections_come_from_coder_log_with_the_retry_explaining_itself(todo_run: Path) -> None:
    be = gather(todo_run).unit("todo-be")
    assert be is not None
    first, retry = be.decisions
    assert (first.attempt, first.last_failure) == (1, None)
    assert retry.attempt == 2 and retry.last_failure and retry.last_cause
    assert retry.this_fix and retry.rationale and retry.changed_files == ["code/service.js"]


def test_every_coder_tester_and_decide_step_is_read(todo_run: Path) -> None:
    data = gather(todo_run)
    roles = [(s.msg.unit_id, s.role, s.attempt) for s in data.steps]
    for unit, tries in (("todo-be", 2), ("todo-fe", 1)):
        for role in ("coder", "tester", "decide"):
            assert [(unit, role, a) for a in range(1, tries + 1)] == [
                r for r in roles if r[:2] == (unit, role)
            ]
    starts = [s.started_at for s in data.steps]
    assert starts == sorted(starts)


def test_the_bug_is_opened_in_the_red_run_and_fixed_by_the_green_one(todo_run: Path) -> None:
    (bug,) = gather(todo_run).bugs
    assert (bug.unit_id, bug.run_id, bug.status) == ("todo-be", "run-1-1", "fixed")
    fixing, move = bug.history  # the loop moved it to fixing when the coder's retry began
    assert (fixing.to, fixing.by, (fixing.model_extra or {}).get("attempt")) == (
        "fixing", "loop", 2
    )
    assert (move.to, move.by, move.fix_refs) == ("fixed", "tester", ["run-2-1"])


def test_costs_are_the_spend_ledgers_and_its_units_add_up_to_its_total(todo_run: Path) -> None:
    lines = [json.loads(x) for x in (todo_run / STEPS_FILE).read_text().splitlines()]
    ledger = json.loads((todo_run / SPEND_FILE).read_text())
    rows, total = cost_table(gather(todo_run))
    assert total.tokens == sum(x["tokens"] for x in lines) > 0
    assert total.cost_usd == ledger["spent_usd"] > 0
    assert [r.unit for r in rows] == ["todo-be", "todo-fe", "todo-app"]
    assert [r.cost_usd for r in rows] == [ledger["units"][r.unit] for r in rows]
    assert sum(to_nano(r.cost_usd) for r in rows) == to_nano(total.cost_usd)  # exactly
    # Nothing stopped this run, so every model call is in a finished step's session (each
    # session's cost kept to 6 decimals).
    assert total.cost_usd == pytest.approx(sum(x["cost_usd"] for x in lines), abs=1e-5)
    assert sum(r.tokens for r in rows) == total.tokens
    assert total.attempts == 4


def test_a_folder_without_the_spend_ledger_sums_its_step_records(run_copy: Path) -> None:
    (run_copy / SPEND_FILE).unlink()
    lines = [json.loads(x) for x in (run_copy / STEPS_FILE).read_text().splitlines()]
    data = gather(run_copy)
    assert data.spend is None and data.notes == []
    assert cost_table(data)[1].cost_usd == pytest.approx(sum(x["cost_usd"] for x in lines))
    (run_copy / SPEND_FILE).write_text('{"spent_usd": "lots"}')
    data = gather(run_copy)
    assert data.spend is None
    assert data.notes == [f"{SPEND_FILE}: spent_usd: input should be a valid number, unable "
                          "to parse string as a number; fix: make it float; costs are summed "
                          "from the step records"]


def test_each_attempt_pairs_the_reflection_with_its_runs_and_the_loop_decision(
    todo_run: Path,
) -> None:
    be = gather(todo_run).unit("todo-be")
    assert be is not None
    one, two = attempts(be)
    assert one.decision and one.decision.attempt == 1
    assert [r.run_id for r in one.runs] == ["run-1-1"]
    assert [e.kind for e in one.loop] == ["loop_retry_coder"]
    assert [r.run_id for r in two.runs] == ["run-2-1"]
    assert [e.kind for e in two.loop] == ["loop_pass"]


def test_a_project_that_never_ran_is_the_graph_alone(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "todo", tmp_path / "todo")
    data = gather(tmp_path / "todo")
    assert not data.ran
    assert [(u.id, u.status, u.attempts) for u in data.units] == [
        ("todo-be", "pending", 0),
        ("todo-fe", "pending", 0),
        ("todo-app", "pending", 0),
    ]


def test_missing_ledgers_and_step_records_leave_runs_to_decide(run_copy: Path) -> None:
    for name in ("timeline.ndjson", "bugs.ndjson", STEPS_FILE):
        (run_copy / name).unlink()
    data = gather(run_copy)
    assert [u.status for u in data.units] == ["passed"] * 3  # latest result.json is ok
    assert data.steps == [] and data.bugs == [] and data.timeline == []
    shutil.rmtree(run_copy / "units" / "todo-fe" / "runs")
    (run_copy / "units" / "todo-be" / "runs" / "run-2-1" / "result.json").unlink()
    assert [u.status for u in gather(run_copy).units] == ["failed", "in_progress", "passed"]


def test_broken_lines_and_files_become_notes_not_errors(run_copy: Path) -> None:
    with (run_copy / STEPS_FILE).open("a") as f:
        f.write('{"role": "coder"}\nnot json at all\n')
    (run_copy / "units" / "todo-fe" / "runs" / "run-1-1" / "result.json").write_text("{oops")
    data = gather(run_copy)
    assert len(data.steps) == 12
    assert any("fleet-steps.ndjson: 1 invalid line" in n for n in data.notes)
    assert any("units/todo-fe/runs/run-1-1/result.json" in n for n in data.notes)


def test_a_folder_without_units_json_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ProjectInvalid, match="units.json: file: not found"):
        gather(tmp_path)


def test_a_cyclic_graph_is_drawn_flat_with_a_note(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "todo", tmp_path / "todo")
    path = tmp_path / "todo" / "units.json"
    units = json.loads(path.read_text())
    units["units"][0]["depends_on"] = ["todo-fe"]
    path.write_text(json.dumps(units))
    data = gather(tmp_path / "todo")
    assert [u.level for u in data.units] == [1, 1, 1]
    assert any("not a DAG" in n for n in data.notes)


def test_links_and_fifos_in_the_folder_become_notes_and_never_block(
    run_copy: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.ndjson"
    outside.write_text('{"kind": "loop_pass", "unit_id": "todo-fe", "summary": "forged"}\n')
    for name in ("bugs.ndjson", "units/todo-be/coder.log"):
        (run_copy / name).unlink(missing_ok=True)
        os.mkfifo(run_copy / name)
    (run_copy / "timeline.ndjson").unlink()
    (run_copy / "timeline.ndjson").symlink_to(outside)
    result = run_copy / "units/todo-fe/runs/run-1-1/result.json"
    result.unlink()
    result.symlink_to(outside)
    gathered: list[ReportData] = []
    thread = threading.Thread(target=lambda: gathered.append(gather(run_copy)), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "gather blocked on a fifo"
    [data] = gathered
    assert data.timeline == [] and data.bugs == []
    assert sorted(data.notes) == [
        "bugs.ndjson: is a fifo, not a regular file; skipped",
        "timeline.ndjson: is a symlink; skipped",
        "units/todo-be/coder.log: is a fifo, not a regular file; skipped",
        "units/todo-fe/runs/run-1-1/result.json: file: cannot be read (is a symlink); fix: "
        "make it a file; run skipped",
    ]


def test_gathering_costs_the_same_per_unit_at_any_size(tmp_path: Path) -> None:
    def folder(n: int) -> Path:
        return many_units(tmp_path / str(n), n)

    assert per_item_growth(folder, gather, 300, 3000, tries=2) < LINEAR


def test_every_unit_of_a_big_run_gets_its_own_steps_and_loop_events(tmp_path: Path) -> None:
    data = gather(many_units(tmp_path, 120))
    assert all([s.msg.unit_id for s in u.steps] == [u.id] * 3 for u in data.units)
    assert all([e.kind for e in u.loop_events] == ["loop_release", "loop_pass"]
               for u in data.units)
    assert {u.status for u in data.units} == {"passed"}
    assert data.unit("u00119") is data.units[-1] and data.unit("ghost") is None
