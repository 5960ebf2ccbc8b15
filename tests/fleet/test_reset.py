"""`devloop reset`: which units start over (pure), and what a reset leaves in Redis and in
the folder (a real Redis): nothing of the units' runs, the spec kept, the two agreeing."""

from __future__ import annotations

import json
from pathlib import Path

from devloop.fleet.dispatch import enqueue_project, reconcile
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, save_step, steps_of
from devloop.fleet.reset import KEPT, ResetPlan, agreed, plan_reset, question, told
from devloop.fleet.wipe import agent_state_names, reset_in_folder, reset_in_store, role_written
from devloop.ledgers import Timeline
from devloop.project.load import load_project
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build
from tests.growth import LINEAR, per_item_growth

PASSED = UnitState(status="passed", attempt=2, scripted=True)
GRAPH = {"money": [], "cart": ["money"], "report": ["cart"], "audit": ["money"], "solo": []}


def test_a_reset_unit_takes_every_unit_that_ran_on_top_of_it_along() -> None:
    states = {"money": PASSED, "cart": UnitState(status="passed", attempt=1),
              "report": UnitState(status="blocked_upstream"), "audit": UnitState(),
              "solo": PASSED}
    plan = plan_reset(GRAPH, states, ["money"])
    # audit never ran: it only waits for money again; solo is not below money.
    assert plan == ResetPlan(("money", "cart", "report"),
                             {"cart": ("money",), "report": ("money",)})
    # Named out of order, a unit named twice: dependency order, once.
    assert plan_reset(GRAPH, states, ["cart", "money", "cart"]).units == (
        "money", "cart", "report")
    # A dependent alone: its upstream stays.
    assert plan_reset(GRAPH, states, ["cart"]).units == ("cart", "report")
    # Nothing named: every unit, the ones that never ran too.
    every = plan_reset(GRAPH, states).units
    assert sorted(every) == sorted(GRAPH) and every.index("cart") < every.index("report")


def test_planning_a_reset_of_every_unit_costs_the_same_per_unit_at_any_size() -> None:
    def project(n: int) -> tuple[dict[str, list[str]], dict[str, UnitState]]:
        ids = [f"u{i:05d}" for i in range(n)]
        graph = {u: [ids[i - 50]] if i >= 50 else [] for i, u in enumerate(ids)}
        return graph, dict.fromkeys(ids, PASSED)

    assert per_item_growth(project, lambda p: plan_reset(*p), 200, 2000, tries=2) < LINEAR


def test_the_person_is_told_what_goes_what_stays_and_asked() -> None:
    states = {"money": PASSED, "cart": UnitState(status="blocked", attempt=5)}
    plan = plan_reset({"money": [], "cart": ["money"]}, states, ["money"])
    assert told(plan, states) == [
        "money: passed (scripted) at attempt 2; starts over: its code, tests, runs, "
        "contract.json, coder.log, sessions and attempts go",
        "cart: blocked at attempt 5; starts over too: it depends on money, and its code was "
        "built and tested against the code money loses",
        KEPT,
    ]
    assert question(plan, "p-shop") == "Reset 2 units of p-shop (money, cart)? [y/N] "
    assert question(ResetPlan(("money",)), "p-shop") == "Reset 1 unit of p-shop (money)? [y/N] "
    assert [agreed(a) for a in ("y\n", "YES", " yes ", "", None, "n\n", "no", "yy")] == [
        True, True, True, False, False, False, False, False]


def test_the_spec_is_never_a_role_written_file() -> None:
    assert [p for p in ("code/a.py", "tests/t.py", "runs/run-1-1/result.json",
                        "contract.json", "coder.log", "spec.json", "notes.md", "codex/x")
            if role_written(p)] == ["code/a.py", "tests/t.py", "runs/run-1-1/result.json",
                                    "contract.json", "coder.log"]


def _ran(store: RedisStore, pid: str, unit: str) -> None:
    """What a passed run leaves of a unit: committed files, steps, sessions, agent state,
    a pending memory note, its state and a timeline event."""
    files = {"code/unit.py": b"def value():\n    return 42\n", "contract.json": b"{}\n",
             "coder.log": b"---\nattempt: 1\n---\n", "tests/test_unit.py": b"def test(): pass\n",
             "runs/run-1-1/result.json": b"{}\n"}
    version = store.unit_files(pid, unit).version
    assert store.commit_files(pid, unit, role="coder", attempt=1, base_version=version,
                              changes=dict(files)).applied
    msg = StepMsg(pid=pid, unit_id=unit, attempt=1)
    for role in ("coder", "tester", "decide"):
        save_step(store, pid, unit, StepRecord(role=role, attempt=1, msg=msg, worker="w",
                                               started_at=1.0, ended_at=2.0, status="pass"))
        store.save_session(pid, role, unit, {"messages": []})
    for name in agent_state_names(unit):
        store.put_agent_state(pid, name, b"{}")
    store.put_pending_note(pid, "coder", unit, "lesson.md", "a lesson")
    store.keep_passed(pid, unit)
    store.put_state(pid, unit, UnitState(status="passed", attempt=1, tokens=900))
    Timeline(store.sink(pid, "timeline")).append("loop_pass", unit_id=unit, agent="loop")


def test_a_reset_leaves_redis_and_the_folder_agreeing_with_nothing_of_the_runs(
    tmp_path: Path, redis_store: RedisStore
) -> None:
    store = redis_store
    p = build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b", ["a"]), UnitPlan("c")])
    (p / "units/a").mkdir(parents=True)
    (p / "units/a/notes.md").write_text("the user's own file\n")
    enqueue_project(store, p)
    pid = "p-fleet"
    for unit in ("a", "b", "c"):
        _ran(store, pid, unit)
    store.export(pid, p, as_source=True)
    (p / "agent-state/coder-a-todo.json").write_text("{}")  # as the run's exports leave it
    spec = [p / "units.json", p / "sdd/mvcp/units.html"]
    spec_before = [f.read_bytes() for f in spec]

    plan = plan_reset(load_project(p).graph(), store.get_states(pid, ["a", "b", "c"]), ["a"])
    assert plan.units == ("a", "b")
    reset_in_store(store, pid, load_project(p).graph(), plan.units, by="a test")
    reset_in_folder(store, pid, p, plan.units)

    for unit in ("a", "b"):
        assert store.get_state(pid, unit).status == "pending"
        assert store.get_state(pid, unit).attempt == 0
        assert store.get_state(pid, unit).tokens == 900  # what it spent stays counted
        assert not any(role_written(f) for f in store.unit_files(pid, unit).files)
        assert steps_of(store, pid, [unit])[unit] == []
        assert all(store.load_session(pid, r, unit) is None for r in ("coder", "tester"))
        assert all(store.agent_state_file(pid, n) is None for n in agent_state_names(unit))
        assert not (p / "units" / unit / "code").exists()
        assert not (p / "units" / unit / "tests").exists()
        assert not (p / "units" / unit / "runs").exists()
        assert not (p / "units" / unit / "coder.log").exists()
        assert not any((p / "agent-state" / n).exists() for n in agent_state_names(unit))
    assert not any("pending/a/" in k.decode() for k in store.client.hkeys(store.keys(pid).memory))
    # The spec, the user's own file and the unit not below a are untouched.
    assert (p / "units/a/notes.md").read_text() == "the user's own file\n"
    assert spec_before == [f.read_bytes() for f in spec]
    assert store.get_state(pid, "c").status == "passed"
    assert (p / "units/c/code/unit.py").is_file()
    # The folder and Redis agree: each unit's files are the same, and importing the folder
    # finds no edit of any unit.
    for unit in ("a", "b", "c"):
        on_disk = {str(f.relative_to(p / "units" / unit)): f.read_bytes()
                   for f in (p / "units" / unit).rglob("*") if f.is_file()}
        assert on_disk == store.unit_files(pid, unit).files
    assert store.import_project(load_project(p)).changed_units == []
    # The timeline keeps its history and says what happened.
    events = [json.loads(line) for line in (p / "timeline.ndjson").read_text().splitlines()]
    assert [e["kind"] for e in events if e.get("unit_id") == "a"] == [
        "loop_release", "loop_pass", "unit_reset"]
    # The next run starts a again from attempt 1, implement; b waits for it.
    sent = reconcile(store, pid, 0)
    assert [(d.msg.unit_id, d.msg.attempt, d.msg.mode) for d in sent] == [("a", 1, "implement")]
