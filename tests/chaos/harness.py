"""A chaos run: a layered scripted project through `devloop run`, with faults injected while
it works, and the invariants that must hold when it is done.

Faults: SIGKILL of a worker (main and pool processes), SIGKILL of the embedded Redis, a pool
process that holds a lease paused (SIGSTOP) past it and woken, and SIGTERM of `devloop run`
followed by the same command again. The invariants are read from what the run exported into
the project folder and from the processes it started.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from devloop.core.models import BugOpen, RunResult
from devloop.ledgers import BugLedger, FileSink, Timeline, parse_coder_log
from devloop.server.embedded import running_server
from devloop.store import RedisStore
from devloop.store.filesets import files_digest
from devloop.store.snapshot import walk_files
from tests.fleet.builder import UnitPlan, build, script
from tests.proctree import alive
from tests.workers.runproc import RunProcess, clean_env, kill_worker

PID = "p-fleet"
LEASE_TTL_S, GRACE_S = 4.0, 6.0
# Short leases and grace: a dead or paused worker's step is taken over in seconds.
ENV = {"DEVLOOP_LEASE_TTL_S": str(LEASE_TTL_S), "DEVLOOP_RECONCILE_GRACE_S": str(GRACE_S)}


@dataclass(frozen=True)
class ChaosPlan:
    """The project's shape and the faults to inject."""

    layers: int = 4
    width: int = 8
    red_every: int = 3  # every n-th unit's first attempt is red (a bug opened, then fixed)
    latency_ms: int = 1500  # the coder's first model turn
    workers: int = 3
    worker_kills: int = 8
    redis_kills: int = 1
    pauses: int = 1
    sigterm: bool = True
    seed: int = 7


@dataclass
class Fault:
    """One injected fault and how long the run took to recover from it."""

    kind: str
    at_s: float
    recovered_s: float | None = None
    detail: str = ""


@dataclass
class ChaosResult:
    """What a chaos run did: its faults, exit codes, makespan and every pid it started."""

    faults: list[Fault] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)
    makespan_s: float = 0.0
    pids: set[int] = field(default_factory=set)


def chaos_project(root: Path, plan: ChaosPlan) -> Path:
    """layers x width python units; each depends on 1-2 units of the layer before."""
    rng = random.Random(plan.seed)
    plans = []
    for layer in range(1, plan.layers + 1):
        for i in range(1, plan.width + 1):
            deps = [] if layer == 1 else [
                f"l{layer - 1}-u{d}" for d in sorted(rng.sample(range(1, plan.width + 1), 2))
            ][: rng.randint(1, 2)]
            red = (len(plans) + 1) % plan.red_every == 0
            plans.append(UnitPlan(f"l{layer}-u{i}", deps, coder=["bad", "good"] if red else [],
                                  coder_latency_ms={1: plan.latency_ms}))
    project = build(root, plans, pid=PID)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    return project


class Chaos:
    """Runs the project and injects the plan's faults, one after another."""

    def __init__(self, project: Path, plan: ChaosPlan) -> None:
        self.plan, self.rng = plan, random.Random(plan.seed)
        self.run = RunProcess(project, workers=plan.workers, env=clean_env(**ENV))
        self.result = ChaosResult()
        self.started = 0.0

    def go(self, timeout_s: float = 900) -> ChaosResult:
        """Run to the end with every fault injected; the result (AssertionError if stuck)."""
        faults = ["worker"] * self.plan.worker_kills + ["redis"] * self.plan.redis_kills
        self.rng.shuffle(faults)
        if self.plan.sigterm:
            faults.insert(len(faults) // 2, "sigterm")
        # A pause needs a step in flight and a run long enough to see it taken over: early.
        faults = ["pause"] * self.plan.pauses + faults
        self.started = time.monotonic()
        self.run.start()
        try:
            self._settle()
            for kind in faults:
                if self._finished():
                    break
                getattr(self, f"_{kind}")()
                self._settle()
            self.result.exits.append(self.run.wait(timeout_s))
        finally:
            self._note_pids()
            self.run.close()
        self.result.makespan_s = time.monotonic() - self.started
        return self.result

    # --- faults ---------------------------------------------------------------------------

    def _worker(self) -> None:
        victim = self.rng.choice(self.run.workers_now())
        fault = self._fault("worker", f"pid {victim.pid}")
        kill_worker(victim)
        self._wait(lambda: victim.pid not in {w.pid for w in self.run.workers_now()}
                   and len(self.run.workers_now()) == self.plan.workers, "a replacement worker")
        fault.recovered_s = self._since(fault)

    def _redis(self) -> None:
        server = self.run.redis_now()
        assert server is not None, "no embedded Redis to kill"
        fault = self._fault("redis", f"pid {server.pid}")
        os.kill(server.pid, signal.SIGKILL)
        self._wait(lambda: (r := self.run.redis_now()) is not None and r.pid != server.pid
                   and self._answers(), "Redis back")
        fault.recovered_s = self._since(fault)

    def _pause(self) -> None:
        self._wait(lambda: self._lease_holder() is not None, "a step in flight to pause")
        holder = self._lease_holder()
        if holder is None:
            return  # it ended just now: nothing left to pause
        key, owner = holder
        pid = int(owner.split(":")[1])
        fault = self._fault("pause", f"pid {pid} past its lease {key.split(':', 3)[-1]}")
        os.kill(pid, signal.SIGSTOP)
        try:
            # Past its lease and the reconcile grace: another worker takes the step over.
            self._wait(lambda: self._owner(key) not in (None, owner) or self._moved(key),
                       "the paused step taken over", timeout_s=120)
            fault.recovered_s = self._since(fault)
        finally:
            os.kill(pid, signal.SIGCONT)

    def _sigterm(self) -> None:
        fault = self._fault("sigterm", "devloop run, then the same command again")
        passed = self._passed()
        self.run.signal(signal.SIGTERM)
        self.result.exits.append(self.run.wait(120))
        self._note_pids()
        self.run.start()
        self._wait(lambda: self._passed() > passed or self._finished(), "progress after restart")
        fault.recovered_s = self._since(fault)

    # --- looking at the run -----------------------------------------------------------------

    def _fault(self, kind: str, detail: str) -> Fault:
        self._note_pids()
        fault = Fault(kind, round(time.monotonic() - self.started, 1), detail=detail)
        self.result.faults.append(fault)
        return fault

    def _since(self, fault: Fault) -> float:
        return round(time.monotonic() - self.started - fault.at_s, 1)

    def _settle(self) -> None:
        """Let the run work a little between faults (and its workers be all up)."""
        deadline = time.monotonic() + self.rng.uniform(1.0, 2.5)
        while time.monotonic() < deadline and not self._finished():
            self._note_pids()
            time.sleep(0.1)
        self._wait(lambda: len(self.run.workers_now()) == self.plan.workers
                   or self._finished(), "all workers up")

    def _wait(self, check: object, what: str, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while not check():  # type: ignore[operator]
            self._note_pids()
            assert self.run.proc is not None
            if self.run.proc.poll() is not None and not self._finished():
                raise AssertionError(f"the run ended before {what}:\n{self.run.output()}")
            if self.run.proc.poll() is not None:
                return
            assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{self.run.output()}"
            time.sleep(0.1)

    def _note_pids(self) -> None:
        self.result.pids |= {p.pid for p in self.run.children()}

    def _finished(self) -> bool:
        return self.run.proc is not None and self.run.proc.poll() is not None

    def _store(self) -> RedisStore | None:
        endpoint = running_server(self.run.project / ".devloop")
        return RedisStore.from_url(endpoint.url) if endpoint else None

    def _answers(self) -> bool:
        with contextlib.suppress(Exception):
            store = self._store()
            if store is not None:
                with contextlib.closing(store.client):
                    return bool(store.client.ping())
        return False

    def _passed(self) -> int:
        with contextlib.suppress(Exception):
            store = self._store()
            if store is not None:
                try:
                    units = [u.id for u in store.project_record(PID).units.units]
                    return sum(s.status == "passed" for s in store.get_states(PID, units).values())
                finally:
                    store.close()
        return 0

    def _lease_holder(self) -> tuple[str, str] | None:
        """(lease key, owner) of a coder or tester step running now, if any."""
        store = self._store()
        if store is None:
            return None
        try:
            for key in store.client.scan_iter(match=store.keys(PID).lease_pattern):
                owner = store.client.get(key)
                if owner:
                    return key.decode(), owner.decode()
        finally:
            store.close()
        return None

    def _owner(self, key: str) -> str | None:
        store = self._store()
        if store is None:
            return None
        try:
            owner = store.client.get(key)
            return owner.decode() if owner else None
        finally:
            store.close()

    def _moved(self, key: str) -> bool:
        """Whether the unit of a lease key passed its step's attempt (the step is done)."""
        unit, attempt = key.split(":lease:", 1)[1].split(":")[:2]
        store = self._store()
        if store is None:
            return False
        try:
            state = store.get_state(PID, unit)
            return state.attempt > int(attempt) or state.status in ("passed", "blocked")
        finally:
            store.close()


# --- the invariants -------------------------------------------------------------------------


def invariants(project: Path, pids: set[int]) -> dict[str, list[str]]:
    """Each invariant's name and its violations (empty: it holds), from the exported folder."""
    units = [u["id"] for u in yaml.safe_load((project / "units.json").read_text())["units"]]
    timeline = Timeline(FileSink(project / "timeline.ndjson"))
    events = timeline.events()
    loop = [e for e in events if e.agent == "loop"]
    out: dict[str, list[str]] = {}
    passes = Counter(e.unit_id for e in loop if e.kind == "loop_pass")
    out["every unit passed"] = [u for u in units if not passes[u]]
    out["no coder.log attempt twice"] = [
        f"{u}: {attempts}" for u in units
        if len(attempts := _attempts(project / "units" / u / "coder.log")) != len(set(attempts))
    ]
    bugs = BugLedger(FileSink(project / "bugs.ndjson"))
    opened = Counter(f"{e.unit_id}:{e.test_name}" for e in bugs.events()
                     if isinstance(e, BugOpen))
    out["no bug opened twice for one unit:test"] = [k for k, n in opened.items() if n > 1]
    out["every bug opened is fixed"] = [f"{b.id} ({b.dedup_key}): {b.status}"
                                        for b in bugs.list() if b.status != "fixed"]
    out["each passed unit's last result is green, on its final code"] = [
        problem for u in units if (problem := _last_result_problem(project, u))
    ]
    releases = Counter(e.unit_id for e in loop if e.kind == "loop_release")
    out["every unit released once"] = [f"{u}: {releases[u]}" for u in units if releases[u] != 1]
    out["no process left running"] = [str(pid) for pid in sorted(pids) if alive(pid)]
    return out


def _attempts(log: Path) -> list[int]:
    return [d.attempt for d in parse_coder_log(log.read_text())] if log.exists() else []


def _last_result_problem(project: Path, unit: str) -> str | None:
    unit_dir = project / "units" / unit
    results = []
    for path in unit_dir.glob("runs/*/result.json"):
        result = RunResult.model_validate_json(path.read_text())
        results.append(((result.attempt, path.parent.name), result))
    if not results:
        return f"{unit}: no run"
    last = max(results, key=lambda item: item[0])[1]
    code = {rel: p.read_bytes() for rel, p in walk_files(unit_dir).items()
            if rel.startswith("code/")}
    if not last.ok:
        return f"{unit}: last run {last.run_id} is not green"
    if last.code_digest != files_digest(code):
        return f"{unit}: last run {last.run_id} tested other code than the final one"
    return None


def report(result: ChaosResult, checks: dict[str, list[str]]) -> str:
    """The faults with their recovery times, and each invariant, as text."""
    lines = ["fault      at (s)  recovered in (s)  detail"]
    for f in result.faults:
        took = "-" if f.recovered_s is None else f"{f.recovered_s:.1f}"
        lines.append(f"{f.kind:<10} {f.at_s:>6.1f}  {took:>16}  {f.detail}")
    lines.append(f"exit codes {result.exits}, makespan {result.makespan_s:.1f} s")
    for name, problems in checks.items():
        lines.append(f"{'ok  ' if not problems else 'FAIL'} {name}"
                     + (f": {problems[:5]}" if problems else ""))
    return "\n".join(lines)
