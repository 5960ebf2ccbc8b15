"""A real `devloop run DIR --llm stub` for bench/scale.py: when its first session starts, the
CPU of the run process against its workers', and the makespan against its lower bound.

The run is started as a user starts it (its own embedded Redis, its own workers). Its
process tree is sampled from /proc every second: the `devloop run` process itself (the
orchestrator, with the stub server it serves in-process), Redis, and every other process
under it (the Celery workers and their pool processes). Sandboxed test commands are
reparented to PID 1 and so counted in neither. (A leading underscore keeps
bench/run_all.py from running it.)
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis

from devloop.core import dag
from devloop.server.embedded import private_state_dir, running_server

TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class RunResult:
    """What one real run showed."""

    units: int
    workers: int
    first_session_s: float | None  # launch -> the first unit's coder step began
    wall_s: float = 0.0
    exit_code: int | None = None
    run_cpu_s: float = 0.0  # the `devloop run` process (and its in-process stub)
    worker_cpu_s: float = 0.0  # Celery workers and pool processes
    redis_cpu_s: float = 0.0
    run_peak_mb: float = 0.0  # the `devloop run` process's peak RSS (its stub's script in it)
    makespan_s: float | None = None
    lower_bound_s: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _proc(pid: int) -> tuple[int, float, str] | None:
    """(parent pid, own CPU seconds, command line) of a live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(
            errors="replace")
    except OSError:
        return None
    return int(stat[1]), (int(stat[11]) + int(stat[12])) / TICK, cmd


def _peak_mb(pid: int) -> float:
    """A live process's peak RSS so far (VmHWM), MB; 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) / 1024 if found else 0.0


class TreeCpu:
    """The last CPU seen of each process under a root, by kind."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.seen: dict[int, tuple[str, float]] = {}
        self.root_peak_mb = 0.0

    def sample(self) -> None:
        procs = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and (found := _proc(int(entry.name))) is not None:
                procs[int(entry.name)] = found
        tree, frontier = {self.root}, {self.root}
        while frontier:
            frontier = {p for p, (pp, _, _) in procs.items() if pp in frontier and p not in tree}
            tree |= frontier
        for pid in tree & procs.keys():
            _, cpu, cmd = procs[pid]
            kind = "run" if pid == self.root else "redis" if "redis-server" in cmd else "worker"
            self.seen[pid] = (kind, cpu)
        self.root_peak_mb = max(self.root_peak_mb, _peak_mb(self.root))

    def total(self, kind: str) -> float:
        return sum(cpu for k, cpu in self.seen.values() if k == kind)


def _first_coding(client: redis.Redis, key: bytes, after: str) -> tuple[float | None, str]:
    """The server time (s) of the first `coding` state event after `after`, and where it read to."""
    for entry_id, fields in client.xrange(key, min="(" + after if after != "-" else "-"):
        after = entry_id.decode()
        if fields.get(b"kind") == b"state" and fields.get(b"status") == b"coding":
            return int(entry_id.split(b"-")[0]) / 1000, after
    return None, after


def real_run(devloop: str, project: Path, pid: str, units: int, workers: int, log: Path,
             stop_after_first: bool = False, timeout_s: float = 6 * 3600) -> RunResult:
    """Run the project with the stub (its output to log); with stop_after_first, interrupt
    it once a session began."""
    result = RunResult(units, workers, None)
    launched = time.time()
    with log.open("wb") as out:
        proc = subprocess.Popen([devloop, "run", str(project), "--llm", "stub", "--workers",
                                 str(workers)], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    tree, client, read_to = TreeCpu(proc.pid), None, "-"
    events = f"devloop:{pid}:stream:events".encode()
    try:
        while proc.poll() is None:
            tree.sample()
            if result.first_session_s is None:
                if client is None and (found := running_server(private_state_dir(project))):
                    client = redis.Redis.from_url(found.url)
                if client is not None:
                    at, read_to = _first_coding(client, events, read_to)
                    if at is not None:
                        result.first_session_s = round(at - launched, 1)
                        if stop_after_first:
                            os.kill(proc.pid, signal.SIGINT)
            if time.time() - launched > timeout_s:
                result.notes.append(f"stopped after {timeout_s:.0f} s")
                os.kill(proc.pid, signal.SIGINT)
                timeout_s = float("inf")
            time.sleep(1.0)
        result.exit_code = proc.returncode
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if client is not None:
            client.close()
    result.wall_s = round(time.time() - launched, 1)
    result.run_cpu_s = round(tree.total("run"), 1)
    result.run_peak_mb = round(tree.root_peak_mb)
    result.worker_cpu_s = round(tree.total("worker"), 1)
    result.redis_cpu_s = round(tree.total("redis"), 1)
    if result.exit_code not in (0, None) and (said := log.read_text(errors="replace").strip()):
        result.notes.append(said.splitlines()[-1][:300])
    if not stop_after_first:
        result.makespan_s, result.lower_bound_s = makespan(project)
    return result


def makespan(project: Path) -> tuple[float | None, float | None]:
    """(makespan, max(critical path, total work / slots)) from the run's step records."""
    steps_file = project / "agent-state" / "fleet-steps.ndjson"
    if not steps_file.is_file():
        return None, None
    records = [json.loads(line) for line in steps_file.read_text().splitlines() if line]
    if not records:
        return None, None
    units = json.loads((project / "units.json").read_text())["units"]
    graph = {u["id"]: list(u.get("depends_on", [])) for u in units}
    work: dict[str, float] = {}
    for r in records:
        unit = r["msg"]["unit_id"]
        work[unit] = work.get(unit, 0.0) + r["ended_at"] - r["started_at"]
    slots = len({":".join(r["worker"].split(":")[:2]) for r in records}) or 1
    start = min(r.get("sent_at") or r["started_at"] for r in records)
    span = max(r["ended_at"] for r in records) - start
    critical, _ = dag.critical_path(graph, work)
    return round(span, 1), round(max(critical, sum(work.values()) / slots), 1)
