"""A layered python project and the Redis state a finished `devloop run` of it leaves.

Used by bench/runloop.py (a leading underscore keeps bench/run_all.py from running it).
The project: layers of `width` units, each depending on 1-3 units of the layer before
(seeded). The state, per unit, has the shape and sizes a real 20-unit `devloop run --llm
stub` left: passed (scripted) at attempt 1, its files at version 2 (code, contract.json,
coder.log, tests, one run's result, coverage, junit and output), three step records
(coder, tester, decide), five timeline entries, five agent-state files, its spend, its
last progress record and its state events. `touch` makes a few units move on the way a
step's end does (a state write with its event, a step record, a commit, a timeline entry).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from devloop.core.money import to_nano
from devloop.fleet.marks import MARKS_FILE
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepOutcome, StepRecord, field
from devloop.fleet.status import RUN_FILE, StepProgress
from devloop.project.load import load_project
from devloop.scaffold import NewProject, render_project
from devloop.store import RedisStore, UnitState
from devloop.store.keys import EVENTS_MAXLEN
from devloop.store.state import state_event
from devloop.store.streams import STREAM_FIELD

T0 = 1_800_000_000.0
BATCH = 500  # units per pipeline


def layered_spec(n: int, width: int = 50, seed: int = 0) -> dict[str, Any]:
    """A spec of n python units in layers of `width`; each depends on 1-3 of the layer before."""
    rng = random.Random(seed)
    units: list[dict[str, Any]] = []
    layer = 0
    while len(units) < n:
        layer += 1
        below = [u["id"] for u in units[-width:]] if layer > 1 else []
        for i in range(1, min(width, n - len(units)) + 1):
            uid = f"l{layer}-u{i:02d}"
            deps = sorted(rng.sample(below, min(len(below), rng.randint(1, 3)))) if below else []
            units.append({
                "id": uid, "kind": "lib", "depends_on": deps,
                "exports": {"module": {f"code/{uid.replace('-', '_')}.py": {"value(x)": "-> int"}}},
                "acceptance": [f"value() of {uid} is zero"],
            })
    return {"company_id": "c-bench", "project_id": f"p-layers-{n}", "stack": "python",
            "units": units}


def write_project(root: Path, spec: dict[str, Any]) -> Path:
    """Write the project folder (units.json, the SDD, spec.json files; no stub script)."""
    for rel, text in render_project(NewProject.model_validate(spec)).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def import_project(store: RedisStore, root: Path) -> tuple[str, list[str]]:
    """Import the folder; its project id and unit ids in units.json order."""
    project = load_project(root)
    store.import_project(project)
    return project.pid, [u.id for u in project.units.units]


def unit_files(unit: str, attempt: int = 1) -> dict[str, bytes]:
    """A passed unit's files, as large as a scripted run leaves them."""
    module = unit.replace("-", "_")
    run = f"runs/run-{attempt}-1"
    filler = "x" * 1500
    return {
        f"code/{module}.py": (f'"""{unit}."""\n\n\ndef value(x):\n'
                              f"    return 0  # {attempt}\n").encode(),
        "contract.json": json.dumps({"unit_id": unit, "version": "sha256:b48e2e4e3183d8fa",
                                     "exports": {"module": {f"code/{module}.py": {}}},
                                     "consumes": []}, indent=2).encode(),
        "coder.log": (f"---\nattempt: {attempt}\nthis_fix: First version of {unit}\n"
                      "rationale: The smallest code that meets the contract\n---\n").encode(),
        f"tests/test_{module}.py": (f"from {module} import value\n\n\n"
                                    "def test_value_is_zero():\n    assert value(1) == 0\n"
                                    ).encode() * 2,
        f"{run}/result.json": json.dumps({"run_id": f"run-{attempt}-1", "unit_id": unit,
                                          "ok": True, "pad": filler[:900]}).encode(),
        f"{run}/coverage.json": json.dumps({"files": {module: filler}}).encode(),
        f"{run}/junit.xml": f"<testsuite name='{unit}'>{filler[:300]}</testsuite>".encode(),
        f"{run}/stdout.txt": f"1 passed in 0.01s ({unit})\n".encode() * 5,
        f"{run}/stderr.txt": b"",
    }


def step_records(pid: str, unit: str, at: float, attempt: int = 1) -> list[StepRecord]:
    """The coder, tester and decide records of one green attempt starting at `at`."""
    msg = StepMsg(pid=pid, unit_id=unit, attempt=attempt, sent_at=at)
    output: dict[str, Any] = {
        "coder": {"ok": True, "mode": "implement", "unit_id": unit, "attempt": attempt,
                  "files_written": ["code/x.py", "coder.log", "contract.json"],
                  "decision": {"this_fix": f"First version of {unit}",
                               "rationale": "The smallest code that meets the contract",
                               "changed_files": ["code/x.py", "contract.json"]},
                  "sandbox_violations": [], "duration_ms": 780, "tokens_used": 6674},
        "tester": {"ok": True, "mode": "test", "unit_id": unit, "run_id": f"run-{attempt}-1",
                   "summary": {"total": 1, "passed": 1, "failed": 0, "skipped": 0},
                   "failures": [], "duration_ms": 13712, "tokens_used": 6959,
                   "coverage": {"lines": 1.0, "branches": None,
                                "files": {"code/x.py": {"lines": 1.0, "branches": None}},
                                "unexecuted": []}},
        "decide": {"reason": "tests green"},
    }
    records = []
    start = at
    for role, span, tokens, status in (("coder", 1.2, 6674, "completed"),
                                       ("tester", 8.8, 6959, "completed"),
                                       ("decide", 0.01, 0, "pass")):
        records.append(StepRecord(
            role=role, attempt=attempt, msg=msg, worker=f"vm:101:{pid}:{unit}:{role}:{attempt}",
            sent_at=start, started_at=start, ended_at=start + span, tokens=tokens,
            cost_usd=0.018 if tokens else 0.0, status=status, output=output[role],
            timings={"materialize_ms": 131, "session_ms": 784, "commit_ms": 4} if tokens else {},
            outcome=StepOutcome(tester_ran=role == "tester", tests_ok=role == "tester")
            if role != "decide" else None))
        start += span
    return records


def agent_state(unit: str) -> dict[str, bytes]:
    """The unit's agent-state files a scripted pass leaves."""
    todo = [{"id": f"step-00{i}", "title": f"step {i} of {unit}", "status": "done"}
            for i in range(1, 6)]
    return {
        f"coder-{unit}-todo.json": json.dumps(todo).encode(),
        f"coder-{unit}.json": json.dumps({"status": "completed", "started": 1796409209.1,
                                          "duration_ms": 784}).encode(),
        f"tester-{unit}-todo.json": json.dumps(todo[:3]).encode(),
        f"tester-{unit}.json": json.dumps({"status": "completed", "started": 1796409209.9,
                                           "duration_ms": 87}).encode(),
        f"tester-{unit}-tests.json": json.dumps({"digest": "sha256:" + "e" * 64, "attempt": 1,
                                                 "run_id": "run-1-1"}).encode(),
    }


def timeline(unit: str, attempt: int = 1) -> list[str]:
    """The unit's timeline lines of one green attempt."""
    kinds = ("loop_release", "unit_coded", "unit_tested", "test_passed", "loop_pass")
    return [json.dumps({"ts": "2027-01-15T08:00:00Z", "kind": k, "unit_id": unit,
                        "summary": f"{unit}: {k}", "agent": "loop"}) for k in kinds[:5]]


def _unit_writes(pipe: Any, store: RedisStore, pid: str, unit: str, at: float,
                 attempt: int = 1) -> None:
    """Queue what one green attempt of unit leaves in Redis."""
    keys = store.keys(pid)
    state = UnitState(status="passed", attempt=attempt, tokens=13_633, started_at=at,
                      updated_at=at + 10, scripted=True)
    pipe.hset(keys.files(unit), mapping=unit_files(unit, attempt))  # type: ignore[arg-type]
    pipe.hincrby(keys.meta(unit), "version", 2)
    pipe.hset(keys.commits(unit), mapping={f"coder:{attempt}": 2 * attempt - 1,
                                           f"tester:{attempt}": 2 * attempt})
    for record in step_records(pid, unit, at, attempt):
        pipe.hset(store.keys(pid).steps(unit), field(record.role, record.attempt, 1),
                  record.model_dump_json())
    pipe.set(keys.state(unit), state.model_dump_json())
    pipe.xadd(keys.events, state_event(unit, state), maxlen=EVENTS_MAXLEN, approximate=True)
    for line in timeline(unit, attempt):
        pipe.xadd(keys.stream("timeline"), {STREAM_FIELD: line.encode()})
    pipe.hset(keys.agent_state, mapping=agent_state(unit))  # type: ignore[arg-type]
    nano = to_nano(0.0365628)
    pipe.hincrby(store.keys(pid).spend, f"unit:{unit}", nano)
    pipe.hincrby(store.keys(pid).spend, "total", nano)
    pipe.hincrby(store.keys(pid).spend, "scripted", nano)
    progress = StepProgress(role="tester", attempt=attempt, since=at + 1.2, step=3, total=3,
                            turn=4, tool="run_tests")
    pipe.hset(store.keys(pid).progress, unit, progress.model_dump_json())


def fill_finished(store: RedisStore, pid: str, units: list[str]) -> None:
    """Leave every unit as a finished scripted run does: passed, with its files and records."""
    keys = store.keys(pid)
    for start in range(0, len(units), BATCH):
        with store.client.pipeline(transaction=False) as pipe:
            for i, unit in enumerate(units[start:start + BATCH], start=start):
                _unit_writes(pipe, store, pid, unit, T0 + 3 * i)
            pipe.execute()
    store.client.hset(keys.agent_state, RUN_FILE, json.dumps({"llms": ["stub"]}))
    store.client.hset(keys.agent_state, MARKS_FILE, json.dumps({"units": units}))


def touch(store: RedisStore, pid: str, units: list[str], attempt: int) -> None:
    """Make units move on as a step's end does: a new attempt's files, records, state."""
    with store.client.pipeline(transaction=False) as pipe:
        for unit in units:
            pipe.hdel(store.keys(pid).files(unit), *unit_files(unit, attempt - 1))
            _unit_writes(pipe, store, pid, unit, T0 + 100_000 + attempt, attempt)
        pipe.execute()
