"""Write project folders the way a run leaves them, through DevLoop's own writers and models."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devloop.core.models import Failure, RunResult, RunSummary
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import STEPS_FILE, StepRecord
from devloop.ledgers import BugLedger, FileSink, Timeline, append_decision

T0 = 1_800_000_000.0


@dataclass
class Folder:
    """A project folder being written: units.json, runs, coder.log, ledgers and step records."""

    root: Path
    pid: str = "p-demo"

    def units(self, graph: dict[str, list[str]]) -> Folder:
        """units.json for a graph (unit id -> dependencies)."""
        self.root.mkdir(parents=True, exist_ok=True)
        units = [
            {"id": u, "kind": "be", "depends_on": deps, "contract_hash": "sha256:0000000000000000"}
            for u, deps in graph.items()
        ]
        data = {"company_id": "c-demo", "project_id": self.pid, "stack": "node", "units": units}
        (self.root / "units.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
        return self

    def step(
        self,
        unit: str,
        role: str,
        attempt: int,
        start: float,
        end: float,
        *,
        worker: str = "host:101",
        tokens: int = 0,
        cost: float = 0.0,
        status: str = "completed",
        output: dict[str, Any] | None = None,
        tester_try: int = 1,
        sent: float | None = None,
    ) -> StepRecord:
        """Append a step record; times are seconds after T0."""
        msg = StepMsg(pid=self.pid, unit_id=unit, attempt=attempt, tester_try=tester_try)
        record = StepRecord(
            role=role,
            attempt=attempt,
            tester_try=tester_try,
            msg=msg,
            worker=f"{worker}:{self.pid}:{unit}:{role}:{attempt}",
            sent_at=T0 + (start if sent is None else sent),
            started_at=T0 + start,
            ended_at=T0 + end,
            tokens=tokens,
            cost_usd=cost,
            status=status,
            output=output or {},
        )
        FileSink(self.root / STEPS_FILE).append(record.model_dump_json())
        return record

    def run(
        self,
        unit: str,
        attempt: int,
        ok: bool,
        failures: list[Failure] | None = None,
        tester_try: int = 1,
    ) -> RunResult:
        """units/{unit}/runs/run-A-T/result.json."""
        fails = failures or []
        result = RunResult(
            run_id=f"run-{attempt}-{tester_try}",
            unit_id=unit,
            attempt=attempt,
            ok=ok,
            summary=RunSummary(total=3, passed=3 - len(fails), failed=len(fails)),
            failures=fails,
            duration_ms=1500,
        )
        path = self.root / "units" / unit / "runs" / result.run_id / "result.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result.to_json_dict(), indent=2), encoding="utf-8")
        return result

    def decision(self, unit: str, attempt: int, this_fix: str, **more: Any) -> None:
        """A coder.log block, through the real writer."""
        fields = {"attempt": attempt, "this_fix": this_fix, "rationale": "because", **more}
        fields.setdefault("changed_files", ["code/index.js"])
        if attempt > 1:
            fields.setdefault("last_failure", "a test failed")
            fields.setdefault("last_cause", "a bug")
        append_decision(self.root / "units" / unit / "coder.log", fields)

    def loop(self, unit: str, kind: str, attempt: int, summary: str) -> None:
        """A loop_* timeline event for the run of that attempt."""
        Timeline(FileSink(self.root / "timeline.ndjson")).append(
            kind, unit_id=unit, ref=f"run-{attempt}-1", summary=summary, agent="loop"
        )

    def bugs(self) -> BugLedger:
        """The folder's bug ledger (real bugs.ndjson writer)."""
        return BugLedger(FileSink(self.root / "bugs.ndjson"))


def attempt(
    folder: Folder, unit: str, n: int, at: float, ok: bool, worker: str, hint: str = ""
) -> float:
    """One coder -> tester -> decide round with its files; returns when it ended."""
    failures = [] if ok else [Failure(test=f"{unit} works", expected=200, got=500, hint=hint)]
    folder.decision(unit, n, f"attempt {n} of {unit}")
    folder.step(unit, "coder", n, at, at + 1.5, worker=worker, tokens=12_000, cost=0.02)
    folder.run(unit, n, ok, failures)
    folder.step(
        unit,
        "tester",
        n,
        at + 1.5,
        at + 3.5,
        worker=worker,
        tokens=8_000,
        cost=0.01,
        output={"ok": ok},
    )
    folder.step(
        unit,
        "decide",
        n,
        at + 3.5,
        at + 3.52,
        worker=worker,
        status="pass" if ok else "retry_coder",
    )
    return at + 3.6


def blocked_story(root: Path) -> Path:
    """Six units: a passes, b blocks after 3 red attempts, c and e wait on it, d passes, f is new.

    a -> b -> c -> e
    a -> d ------> e        f (no dependencies, never started)
    """
    folder = Folder(root).units(
        {"a": [], "b": ["a"], "c": ["b"], "d": ["a"], "e": ["c", "d"], "f": []}
    )
    end = attempt(folder, "a", 1, 0.0, True, "vm:101")
    folder.loop("a", "loop_pass", 1, "tests green")
    at_d = attempt(folder, "d", 1, end, True, "vm:102")
    folder.loop("d", "loop_pass", 1, "tests green")
    for n in (1, 2, 3):
        end = attempt(folder, "b", n, end, False, "vm:101", hint="return 200 when the item exists")
        kind = "loop_block" if n == 3 else "loop_retry_coder"
        reason = (
            "same failure 3 times: blocked"
            if n == 3
            else f"failed; coder retries as attempt {n + 1}"
        )
        folder.loop("b", kind, n, reason)
    bug, _ = folder.bugs().open("b", "run-1-1", "b works", title="b answers 500")
    assert at_d < end and bug.status == "open"
    return root


def many_units(root: Path, n: int, workers: int = 4) -> Path:
    """n units in a chain of layers of 50, each with a coder, tester and decide step on one
    of `workers` lanes and its loop_release and loop_pass events (no runs, no coder.log):
    a big run's step records and timeline, written in one go."""
    ids = [f"u{i:05d}" for i in range(n)]
    Folder(root).units({u: [ids[i - 50]] if i >= 50 else [] for i, u in enumerate(ids)})
    steps, events = [], []
    for i, unit in enumerate(ids):
        at = T0 + (i // workers) * 4.0
        msg = StepMsg(pid="p-demo", unit_id=unit, attempt=1)
        for role, start, end in (("coder", 0.0, 1.5), ("tester", 1.5, 3.5), ("decide", 3.5, 3.6)):
            steps.append(StepRecord(
                role=role, attempt=1, msg=msg, worker=f"host:{i % workers}:{unit}:{role}:1",
                sent_at=at + start, started_at=at + start, ended_at=at + end,
                status="pass" if role == "decide" else "completed",
                output={"ok": True} if role == "tester" else {}).model_dump_json())
        for kind in ("loop_release", "loop_pass"):
            events.append(json.dumps({"ts": "2027-01-15T08:00:00Z", "kind": kind,
                                      "unit_id": unit, "ref": "run-1-1", "agent": "loop"}))
    (root / STEPS_FILE).parent.mkdir(parents=True, exist_ok=True)
    (root / STEPS_FILE).write_text("\n".join(steps) + "\n", encoding="utf-8")
    (root / "timeline.ndjson").write_text("\n".join(events) + "\n", encoding="utf-8")
    return root
