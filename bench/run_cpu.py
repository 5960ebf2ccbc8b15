"""`devloop run --llm stub` on a generated layered project: its CPU against the workers'.

A layered python project (bench/_runstate.py: layers of 50 units, each depending on 1-3
units of the layer before) is written by `devloop new` (with its stub script) and run by
`devloop run DIR --llm stub --workers 3` under a pseudo-terminal of 120x50, so the live
view is drawn as on a person's screen. /proc is sampled every second for the CPU seconds
(user + system, each process's own) of `devloop run`'s main thread (the watch loop and
its live view, with the start: the script's parse, the import), its other threads (the
stub server answering every model call), the worker processes (Celery's and its pool's),
and Redis. From the folder's step records: the makespan against its lower bound
max(critical path, total work / 3).

Targets (issue 27): at 1,000 units `devloop run`'s CPU at most half the workers', and its
CPU per unit within 1.2x of that at 100 units. Prints a table and writes
bench/out/run_cpu.json. `--units 100 1000` (default 100: a 1,000-unit run takes an hour).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import select
import struct
import subprocess
import sys
import tempfile
import termios
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from _runstate import layered_spec

from devloop.core import dag
from devloop.fleet.records import STEPS_FILE, StepRecord

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "run_cpu.json"
BIN = Path(sys.executable).parent
WORKERS = 3
ROWS, COLUMNS = 50, 120
TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(stat: Path) -> float | None:
    """utime + stime of one /proc stat file, in seconds (None: it is gone)."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def kind_of(pid: int) -> str | None:
    """What a descendant of the run is: worker, redis, or None (sandboxes and the rest)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return None
    if b"celery" in cmd and b"worker" in cmd:
        return "workers"
    if b"redis-server" in cmd:
        return "redis"
    return None


def children_of(root: int) -> dict[int, int]:
    """pid -> parent pid of every process under root."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, frontier = {root}, {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier and p not in tree}
        tree |= frontier
    return {p: parents[p] for p in tree if p != root and p in parents}


@dataclass
class Sampler:
    """The last CPU seen of each process and thread that counts."""

    root: int
    seen: dict[tuple[str, int], float] = field(default_factory=dict)
    kinds: dict[int, str | None] = field(default_factory=dict)
    watch_started: float | None = None  # main thread CPU when the live view first showed

    def sample(self) -> None:
        main = cpu_of(Path(f"/proc/{self.root}/task/{self.root}/stat"))
        if main is not None:
            self.seen[("main", self.root)] = main
        for task in Path(f"/proc/{self.root}/task").glob("*"):
            if task.name != str(self.root) and (cpu := cpu_of(task / "stat")) is not None:
                self.seen[("threads", int(task.name))] = cpu
        for pid in children_of(self.root):
            if pid not in self.kinds:
                self.kinds[pid] = kind_of(pid)
            kind = self.kinds[pid]
            if kind and (cpu := cpu_of(Path(f"/proc/{pid}/stat"))) is not None:
                self.seen[(kind, pid)] = cpu

    def total(self, kind: str) -> float:
        return sum(cpu for (k, _), cpu in self.seen.items() if k == kind)


def run(n: int, work: Path) -> dict[str, Any]:
    """Write, run and measure one project of n units."""
    spec = work / "spec.yaml"
    spec.write_text(yaml.safe_dump(layered_spec(n)), encoding="utf-8")
    folder = work / "p"
    subprocess.run([str(BIN / "devloop"), "new", str(folder), "--from", str(spec)], check=True,
                   stdout=subprocess.DEVNULL)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(COLUMNS),
           "LINES": str(ROWS)}
    started = time.monotonic()
    proc = subprocess.Popen([str(BIN / "devloop"), "run", str(folder), "--llm", "stub",
                             "--workers", str(WORKERS)], stdin=slave, stdout=slave,
                            stderr=slave, env=env, close_fds=True)
    os.close(slave)
    sampler, tail, next_sample = Sampler(proc.pid), b"", 0.0
    while proc.poll() is None:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                chunk = b""
            tail = (tail + chunk)[-20000:]
            if sampler.watch_started is None and b"units finished" in tail:
                sampler.sample()
                sampler.watch_started = sampler.seen.get(("main", proc.pid), 0.0)
        if time.monotonic() >= next_sample:
            sampler.sample()
            next_sample = time.monotonic() + 1.0
    wall = time.monotonic() - started
    os.close(master)
    steps = [StepRecord.model_validate_json(line)
             for line in (folder / STEPS_FILE).read_text().splitlines() if line.strip()]
    graph = {u["id"]: list(u["depends_on"]) for u in layered_spec(n)["units"]}
    work_by_unit = {u: 0.0 for u in graph}
    for r in steps:
        work_by_unit[r.msg.unit_id] += r.ended_at - r.started_at
    critical, _ = dag.critical_path(graph, work_by_unit)
    makespan = max(r.ended_at for r in steps) - min(r.sent_at or r.started_at for r in steps)
    bound = max(critical, sum(work_by_unit.values()) / WORKERS)
    main, threads = sampler.total("main"), sampler.total("threads")
    watch = main - (sampler.watch_started or 0.0)
    return {
        "units": n, "exit": proc.returncode, "wall_s": round(wall, 1),
        "run_main_s": round(main, 1), "run_watch_s": round(watch, 1),
        "run_threads_s": round(threads, 1), "run_s": round(main + threads, 1),
        "workers_s": round(sampler.total("workers"), 1),
        "redis_s": round(sampler.total("redis"), 1),
        "makespan_s": round(makespan, 1), "lower_bound_s": round(bound, 1),
        "ratio": round(makespan / bound, 3),
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The printed report."""
    figures = [("devloop run, all (CPU s)", "run_s"), ("  main thread", "run_main_s"),
               ("    from the first frame on", "run_watch_s"),
               ("  other threads (stub server)", "run_threads_s"),
               ("workers (CPU s)", "workers_s"), ("redis (CPU s)", "redis_s"),
               ("wall s", "wall_s"), ("makespan / lower bound", "ratio")]
    lines = [f"{'':<32}" + "".join(f"{r['units']:>10,}" for r in rows)]
    for label, key in figures:
        lines.append(f"{label:<32}" + "".join(f"{r[key]:>10}" for r in rows))
    for label, key in (("devloop run / workers", "run_s"), ("  main thread / workers",
                                                             "run_main_s")):
        lines.append(f"{label:<32}" + "".join(f"{r[key] / max(r['workers_s'], 0.1):>10.2f}"
                                              for r in rows))
    lines.append(f"{'main thread ms per unit':<32}"
                 + "".join(f"{1000 * r['run_main_s'] / r['units']:>10.0f}" for r in rows))
    lines.append(f"{'  from the first frame on':<32}"
                 + "".join(f"{1000 * r['run_watch_s'] / r['units']:>10.0f}" for r in rows))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--units", type=int, nargs="+", default=[100])
    args = parser.parse_args()
    rows = []
    for n in args.units:
        with tempfile.TemporaryDirectory(prefix=f"run-cpu-{n}-") as tmp:
            rows.append(run(n, Path(tmp)))
            print(f"ran {n:,} units: {rows[-1]}", file=sys.stderr, flush=True)
    print(table(rows))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "rows": rows}, indent=2) + "\n")
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
