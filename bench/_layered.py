"""Layered projects for scale benchmarks: layers of 50 units, each depending on 1-3 of the
layer before, written as `devloop new` reads them and as a finished run leaves them.

layered_graph(n)              -> unit id -> dependencies (seeded: the same graph every time)
spec_yaml(graph)              -> the project spec YAML `devloop new --from` reads
finished_run(root, graph)     -> step records, timeline, runs and coder.log of a finished run
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from devloop.core.models import CoderDecision, Failure, RunResult, RunSummary, TimelineEvent
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import STEPS_FILE, StepOutcome, StepRecord
from devloop.ledgers.coderlog import format_decision
from devloop.ledgers.sink import dumps_line

WIDTH = 50
PID = "p-layered"
T0 = 1_800_000_000.0
WORKERS = 24  # worker processes the steps are spread over (the Gantt's lanes)


def unit_id(layer: int, index: int) -> str:
    return f"u{layer:04d}-{index:02d}"


def layered_graph(n: int, width: int = WIDTH, seed: int = 27) -> dict[str, list[str]]:
    """n units in layers of `width`; each unit past the first layer depends on 1-3 units
    of the layer before."""
    rng = random.Random(seed)
    graph: dict[str, list[str]] = {}
    previous: list[str] = []
    for layer in range((n + width - 1) // width):
        current = [unit_id(layer, i) for i in range(min(width, n - layer * width))]
        for unit in current:
            graph[unit] = sorted(rng.sample(previous, rng.randint(1, 3))) if previous else []
        previous = current
    return graph


def spec_yaml(graph: dict[str, list[str]], pid: str = PID) -> str:
    """The project spec of the graph: python units exporting one function each."""
    lines = ["company_id: c-bench", f"project_id: {pid}", "stack: python", "units:"]
    for unit, deps in graph.items():
        mod = unit.replace("-", "_")
        lines += [
            f"  - id: {unit}",
            "    kind: lib",
            f"    depends_on: [{', '.join(deps)}]",
            "    exports:",
            "      module:",
            f"        code/{mod}.py:",
            '          "value()": "-> int, 42"',
            "    acceptance:",
            "      - value() returns 42",
        ]
    return "\n".join(lines) + "\n"


def finished_run(root: Path, graph: dict[str, list[str]], pid: str = PID,
                 seed: int = 27) -> None:
    """What a finished `devloop run` leaves in root: per unit a coder, tester and decide
    step per attempt, its loop and role timeline events, runs/*/result.json and coder.log.

    One unit in ten is red once before it passes; two units of the last layer but one
    block after three red attempts (so what depends on them is blocked_upstream and never
    runs).
    """
    rng = random.Random(seed)
    ids = list(graph)
    layer = ids[max(len(ids) - 2 * WIDTH, 0) : max(len(ids) - WIDTH, 0)]
    blocked = {u for i, u in enumerate(layer) if i % 25 == 3}
    dead: set[str] = set()
    for unit, deps in graph.items():  # graph order is topological
        if any(d in blocked or d in dead for d in deps):
            dead.add(unit)
    steps: list[str] = []
    timeline: list[str] = []
    free = [T0] * WORKERS
    for unit in graph:
        if unit in dead:
            continue
        attempts = 3 if unit in blocked else (2 if rng.random() < 0.1 else 1)
        timeline.append(_event(T0, "loop_release", unit, None, "released"))
        log = []
        for n in range(1, attempts + 1):
            green = n == attempts and unit not in blocked
            lane = min(range(WORKERS), key=free.__getitem__)
            at = free[lane]
            worker = f"vm-{lane % 4}:{1000 + lane}"
            ref = f"run-{n}-1"
            steps += _steps(pid, unit, n, at, worker, green)
            free[lane] = at + 6.0 + rng.random() * 4
            log.append(format_decision(CoderDecision(
                attempt=n, this_fix=f"attempt {n}: value() returns 42",
                rationale="the contract says 42", changed_files=[f"code/{unit}.py"],
                last_failure=None if n == 1 else "value() returned 41")))
            _result(root, unit, n, green)
            timeline.append(_event(at + 1.5, "unit_coded", unit, ref, "wrote value()", "coder"))
            timeline.append(_event(at + 3.5, "unit_tested", unit, ref, "ran 1 test", "tester"))
            kind = "loop_pass" if green else ("loop_block" if n == attempts else
                                              "loop_retry_coder")
            timeline.append(_event(at + 3.6, kind, unit, ref, "decided"))
        path = root / "units" / unit / "coder.log"
        path.write_text("".join(log), encoding="utf-8")
    state = root / STEPS_FILE
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("".join(steps), encoding="utf-8")
    (root / "timeline.ndjson").write_text("".join(timeline), encoding="utf-8")


def _event(at: float, kind: str, unit: str, ref: str | None, summary: str,
           agent: str = "loop") -> str:
    from datetime import UTC, datetime

    ts = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = TimelineEvent(ts=ts, kind=kind, unit_id=unit, ref=ref, summary=summary, agent=agent)
    return dumps_line(event.to_json_dict()) + "\n"


def _steps(pid: str, unit: str, n: int, at: float, worker: str, green: bool) -> list[str]:
    """The coder, tester and decide records of one attempt, as ndjson lines."""
    msg = StepMsg(pid=pid, unit_id=unit, attempt=n, mode="implement" if n == 1 else "retry")
    failures = [] if green else [("test_value", "41")]
    spans = [("coder", at, at + 1.5, StepOutcome(reason="end_turn")),
             ("tester", at + 1.5, at + 3.5, StepOutcome(tester_ran=True, tests_ok=green,
                                                        failures=failures)),
             ("decide", at + 3.5, at + 3.52, None)]
    out = []
    for role, start, end, outcome in spans:
        status = ("pass" if green else "retry_coder") if role == "decide" else "completed"
        record = StepRecord(
            role=role, attempt=n, msg=msg, worker=f"{worker}:{pid}:{unit}:{role}:{n}",
            sent_at=start - 0.05, started_at=start, ended_at=end,
            tokens=0 if role == "decide" else 9000, cost_usd=0.0 if role == "decide" else 0.02,
            status=status, output={"ok": green} if role == "tester" else {},
            outcome=outcome,
        )
        out.append(record.model_dump_json() + "\n")
    return out


def _result(root: Path, unit: str, n: int, green: bool) -> None:
    """units/{unit}/runs/run-n-1/result.json."""
    fails = [] if green else [Failure(test="test_value", expected=42, got=41)]
    result = RunResult(run_id=f"run-{n}-1", unit_id=unit, attempt=n, ok=green,
                       summary=RunSummary(total=1, passed=int(green), failed=int(not green)),
                       failures=fails, duration_ms=1200)
    path = root / "units" / unit / "runs" / result.run_id / "result.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.to_json_dict(), indent=2), encoding="utf-8")
