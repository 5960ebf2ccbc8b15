"""A scripted green stays scripted: units passed under `--llm stub` are marked so, and a run
with a real model builds them again from implement (their passed dependents too)."""

from __future__ import annotations

import json
from pathlib import Path

from devloop.console.pages import project_view, unit_view
from devloop.console.render import render as render_page
from devloop.console.sse import state_event
from devloop.core.loop import coder_mode
from devloop.fleet.dispatch import enqueue_project, reconcile, release_dependents
from devloop.fleet.marks import MARKS_FILE, export_marks, note_llm, scripted_now
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, save_step
from devloop.fleet.scripted import Rerun, reruns, run_scripted_again
from devloop.fleet.status import mark_run, project_status
from devloop.ledgers import Timeline
from devloop.project.load import load_project
from devloop.report.data import gather
from devloop.report.render import render
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build
from tests.growth import LINEAR, per_item_growth

PASSED = UnitState(status="passed", attempt=1)
MARKED = UnitState(status="passed", attempt=1, scripted=True)


def test_the_scripted_passes_and_the_passes_built_on_them_run_again_in_dependency_order() -> None:
    graph = {"core": [], "api": ["core"], "ui": ["api"], "solo": [], "late": ["core"]}
    states = {"core": MARKED, "api": MARKED, "ui": PASSED, "solo": PASSED,
              "late": UnitState(status="coding", attempt=2)}
    assert reruns(graph, states) == [
        Rerun("core"),
        Rerun("api", waits_for=("core",)),
        Rerun("ui", built_on=("api", "core"), waits_for=("api",)),
    ]
    # Nothing is scripted: nothing runs again; a unit not passed is never touched.
    assert reruns(graph, dict.fromkeys(graph, PASSED)) == []
    # Every run so far used the stub (a state from before the mark): every pass was scripted.
    legacy = [r.unit for r in reruns(graph, dict.fromkeys(graph, PASSED), True)]
    assert sorted(legacy) == sorted(graph)
    assert legacy.index("core") < legacy.index("api") < legacy.index("ui")


def test_finding_what_runs_again_costs_the_same_per_unit_at_any_size() -> None:
    def project(n: int) -> tuple[dict[str, list[str]], dict[str, UnitState]]:
        ids = [f"u{i:05d}" for i in range(n)]
        graph = {u: [ids[i - 1]] if i % 50 else [] for i, u in enumerate(ids)}  # chains of 50
        # A stub run passed each chain's first half; a real model passed the rest on top.
        return graph, {u: MARKED if i % 50 < 25 else PASSED for i, u in enumerate(ids)}

    assert per_item_growth(project, lambda p: reruns(*p), 200, 2000, tries=2) < LINEAR


def test_the_line_says_why_and_when() -> None:
    assert Rerun("money").line(2) == ("money: passed under scripted turns (--llm stub); running "
                                      "it with the model from implement as attempt 2")
    assert Rerun("ui", ("core",), ("api",)).line(2) == (
        "ui: built on core, which passed under scripted turns (--llm stub); running it with "
        "the model from implement once api passes")


def _pass(store: RedisStore, pid: str, unit: str, attempt: int = 1) -> None:
    """What decide_after leaves for a pass of this run (marked when the run is the stub)."""
    state = UnitState(status="passed", attempt=attempt, scripted=scripted_now(store, pid))
    store.put_state(pid, unit, state)
    save_step(store, pid, unit, StepRecord(
        role="coder", attempt=attempt, msg=StepMsg(pid=pid, unit_id=unit, attempt=attempt),
        worker="w", started_at=0.0, ended_at=1.0, status="completed"))
    release_dependents(store, pid, unit)


def test_a_real_run_builds_scripted_units_again_and_a_stub_run_resumes_them(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    folder = build(tmp_path / "p", [UnitPlan("core"), UnitPlan("api", ["core"])])
    project = load_project(folder)
    pid = project.pid
    enqueue_project(redis_store, folder)
    mark_run(redis_store, pid, "stub")
    _pass(redis_store, pid, "core")
    _pass(redis_store, pid, "api")
    redis_store.save_session(pid, "coder", "core", {"messages": ["scripted"]})
    export_marks(redis_store, pid)

    rows = {r.unit_id: r for r in project_status(redis_store, pid).units}
    assert [(rows[u].status, rows[u].scripted, rows[u].label) for u in ("core", "api")] == [
        ("passed", True, "passed (scripted)")] * 2
    assert json.loads(project_status(redis_store, pid).model_dump_json())["units"][0][
        "scripted"] is True
    assert json.loads(redis_store.agent_state_file(pid, MARKS_FILE) or b"") == {
        "units": ["core", "api"]}

    # Another stub run: nothing to do, they stay passed (and scripted).
    mark_run(redis_store, pid, "stub")
    assert reconcile(redis_store, pid, 0) == []
    assert project_status(redis_store, pid).count("passed") == 2

    # A run with a real model: core starts again at attempt 2 from implement, api waits.
    mark_run(redis_store, pid, "anthropic")
    done = run_scripted_again(redis_store, project)
    sent, lines = done.sent, done.lines
    assert done.units == ["core", "api"]
    assert lines == [
        "core: passed under scripted turns (--llm stub); running it with the model from "
        "implement as attempt 2",
        "api: passed under scripted turns (--llm stub); running it with the model from "
        "implement once core passes",
    ]
    assert [(d.msg.unit_id, d.msg.attempt, d.msg.mode) for d in sent] == [
        ("core", 2, "implement")]
    core, api = redis_store.get_state(pid, "core"), redis_store.get_state(pid, "api")
    assert (core.status, core.attempt, core.scripted, coder_mode(core)) == (
        "coding", 2, False, "implement")
    assert (api.status, api.attempt, api.scripted) == ("pending", 1, False)
    assert redis_store.load_session(pid, "coder", "core") is None  # no scripted turn kept
    assert json.loads(redis_store.agent_state_file(pid, MARKS_FILE) or b"") == {"units": []}
    # A lost chain of core comes back from implement too; api is not ready (core not passed).
    assert [(d.msg.unit_id, d.msg.attempt, d.msg.mode) for d in reconcile(redis_store, pid, 0)
            ] == [("core", 2, "implement")]
    assert run_scripted_again(redis_store, project).lines == []  # said and done once

    # core passes under the model: api is released again (once), at attempt 2, from implement.
    _pass(redis_store, pid, "core", attempt=2)
    api = redis_store.get_state(pid, "api")
    assert (api.status, api.attempt, coder_mode(api)) == ("coding", 2, "implement")
    assert not redis_store.get_state(pid, "core").scripted
    assert release_dependents(redis_store, pid, "core") == []


def test_the_report_labels_scripted_passes_from_the_folder(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    folder = build(tmp_path / "p", [UnitPlan("core"), UnitPlan("real")])
    pid = load_project(folder).pid
    enqueue_project(redis_store, folder)
    note_llm(redis_store, pid, "stub")
    _pass(redis_store, pid, "core")
    note_llm(redis_store, pid, "anthropic")
    _pass(redis_store, pid, "real")
    for unit, kind in [("core", "loop_pass"), ("real", "loop_pass")]:
        Timeline(redis_store.sink(pid, "timeline")).append(kind, unit_id=unit, agent="loop",
                                                           summary="green")
    export_marks(redis_store, pid)
    redis_store.export(pid, folder, as_source=True)

    data = gather(folder)
    assert [(u.id, u.status, u.scripted) for u in data.units] == [
        ("core", "passed", True), ("real", "passed", False)]
    html = render(data)
    assert "passed (scripted)" in html and "data-scripted-legend" in html


def test_the_console_labels_scripted_passes_on_its_pages_and_in_its_live_events(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    folder = build(tmp_path / "p", [UnitPlan("core"), UnitPlan("real")])
    pid = load_project(folder).pid
    enqueue_project(redis_store, folder)
    note_llm(redis_store, pid, "stub")
    base = UnitState(status="testing", attempt=1)
    for unit in ("core", "real"):
        redis_store.put_state(pid, unit, base)
    # The decision's compare-and-set says in its live event whether the pass was scripted.
    assert redis_store.cas_state(pid, "core", "testing", 1, MARKED)
    assert redis_store.cas_state(pid, "real", "testing", 1, PASSED)
    events = redis_store.client.xrange(redis_store.keys(pid).events)
    labels = {e["unit"]: (e["chip"], e["label"])
              for e in (state_event(fields) for _id, fields in events[-2:])}
    assert labels == {"core": ("passed (scripted)", "passed (scripted) · 1 attempt"),
                      "real": ("passed", "passed · 1 attempt")}

    page = render_page("project.html.j2", v=project_view(redis_store, pid), since="", nonce="n",
                  done=None, unit_href=lambda unit: f"/p/{pid}/u/{unit}", target=pid,
                  link=lambda path: path)
    assert page.count("passed (scripted) · 1 attempt") == 1 and "(1 scripted)" in page
    unit = render_page("unit.html.j2", v=unit_view(redis_store, pid, "core"), since="", nonce="n",
                  done=None, link=lambda path: path)
    assert "passed (scripted)</span>" in unit
