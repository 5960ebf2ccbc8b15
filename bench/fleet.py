"""Fleet makespan against its lower bound, and orchestration overhead per attempt.

A generated python project (8 layers of 25 units, each depending on 1-3 units of the
layer before, seeded) is scaffolded with devloop.scaffold, scripted with its trivial
stub script (a fixed latency per model turn, two turns per session), and run by W
Celery worker processes on a private Redis, with real sandboxes and real pytest. The
workers are started and answering before the project is enqueued, so worker start-up
is not in the makespan. Everything below is computed from the run's own step records.

The default turn latency, 1 s, is still shorter than a real model turn (several seconds).
Much shorter turns (`--latency-ms 150`) make a small machine run W sessions' worth of
orchestration, sandboxes and pytest faster than it has CPUs for: the run is then CPU-bound
and the overhead it reports is mostly waiting for a CPU; the table says so when it is.

Prints a table and writes bench/out/fleet.json. Targets: makespan within 1.15x of
max(critical path, total work / W) at W=8; median overhead per attempt under 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from _fleet_metrics import Run, summarize

from devloop.cli.run.procs import spawn, stop, worker_command
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.records import export_steps, steps_of
from devloop.llm.stub import StubServer
from devloop.scaffold import scaffold, trivial_script
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from workers.celery_queue import CeleryQueue  # imports the tasks: not part of the makespan

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "fleet.json"
TERMINAL = ("passed", "blocked", "blocked_upstream")
KINDS = ("lib", "db", "mw", "be")
TARGET_RATIO, TARGET_OVERHEAD_MS = 1.15, 50.0
CPU_BOUND = 0.85  # share of all CPUs busy above which the run is reported as CPU-bound


# --- the project ----------------------------------------------------------------------


def layered_spec(layers: int, width: int, seed: int) -> dict[str, Any]:
    """A spec of layers x width python units; each depends on 1-3 units of the layer before."""
    rng = random.Random(seed)
    units = []
    for layer in range(1, layers + 1):
        for i in range(1, width + 1):
            uid = f"l{layer}-u{i:02d}"
            deps = [] if layer == 1 else rng.sample(range(1, width + 1), rng.randint(1, 3))
            module = uid.replace("-", "_")
            units.append(
                {
                    "id": uid,
                    "kind": KINDS[(layer + i) % len(KINDS)],
                    "depends_on": [f"l{layer - 1}-u{d:02d}" for d in sorted(deps)],
                    "exports": {"module": {f"code/{module}.py": {"value(x)": "-> int"}}},
                    "acceptance": [f"value() of {uid} is zero", f"{uid} imports cleanly"],
                }
            )
    return {"company_id": "c-bench", "project_id": "p-fleet", "stack": "python", "units": units}


# --- running it -----------------------------------------------------------------------


def proc_cpu() -> dict[int, tuple[int, float]]:
    """pid -> (parent pid, CPU seconds incl. reaped children) of every process, from /proc."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        # utime, stime, cutime, cstime: a reaped child's time lives on in its parent.
        out[int(stat.parent.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    return out


def cpu_split(
    before: dict[int, tuple[int, float]], after: dict[int, tuple[int, float]]
) -> tuple[float, float]:
    """(CPU-s of this process tree, CPU-s of other processes) between two snapshots.

    Neither counts PID 1: sandboxed commands are reparented to it, and so are other
    tenants' orphans, so its share cannot be told apart.
    """
    tree, frontier = {os.getpid()}, {os.getpid()}
    while frontier:
        frontier = {p for p, (pp, _) in after.items() if pp in frontier and p not in tree}
        tree |= frontier
    mine = others = 0.0
    for pid, (_, cpu) in after.items():
        used = cpu - before.get(pid, (0, 0.0))[1]
        if pid in tree:
            mine += used
        elif pid > 1:
            others += used
    return mine, others


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


@contextmanager
def workers_up(
    env: dict[str, str], count: int, logs: Path, queue: CeleryQueue
) -> Iterator[None]:
    """Start count worker processes and wait until each answers a ping."""
    procs = [
        spawn(worker_command(name=f"w{i}@%h"), env, logs / f"worker-{i}.log") for i in range(count)
    ]
    try:
        deadline = time.monotonic() + 120
        while len(queue.app.control.ping(timeout=1.0)) < count:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"workers did not come up; see {logs}/worker-*.log")
        yield
    finally:
        stop(procs)


def run_fleet(work: Path, project: Path, workers: int, latency_ms: int, timeout_s: float) -> Run:
    """Run project on a private Redis with the stub and W workers; return its records."""
    script = trivial_script(project, latency_ms=latency_ms)
    with RedisServer(work / "redis", appendonly=True) as server, StubServer(script) as stub:
        env = {
            **os.environ,
            "DEVLOOP_REDIS_URL": server.celery_url,
            "ANTHROPIC_BASE_URL": stub.base_url,
            "ANTHROPIC_API_KEY": "bench",
        }
        queue = CeleryQueue()
        queue.connect(server.celery_url)
        store = RedisStore(server.client())
        with workers_up(env, workers, work / "logs", queue):
            busy0, total0 = cpu_times()
            procs0 = proc_cpu()
            self0 = resource.getrusage(resource.RUSAGE_SELF)
            enqueued_at = time.time()
            report, dispatches = enqueue_project(store, project)
            import_s = time.time() - enqueued_at
            queue.send(dispatches)
            graph = {u.id: list(u.depends_on) for u in store.project_record(report.pid).units.units}
            statuses = wait_for_end(store, report.pid, list(graph), timeout_s)
            finished_at = time.time()
            busy1, total1 = cpu_times()
            fleet_cpu, other_cpu = cpu_split(procs0, proc_cpu())
            self1 = resource.getrusage(resource.RUSAGE_SELF)
        steps = steps_of(store, report.pid, list(graph))
        export_steps(store, report.pid, project)
        run_ms = {
            (unit, path.split("/")[1]): int(json.loads(raw).get("duration_ms", 0))
            for unit in graph
            for path, raw in store.unit_files(report.pid, unit).files.items()
            if path.startswith("runs/") and path.endswith("/result.json")
        }
    return Run(
        graph=graph,
        steps=steps,
        test_run_ms=run_ms,
        enqueued_at=enqueued_at,
        finished_at=finished_at,
        statuses=statuses,
        cpu_busy=(busy1 - busy0) / max(1.0, total1 - total0),
        fleet_cpu_s=fleet_cpu,
        other_cpu_s=other_cpu,
        bench_cpu_s=(self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime),
        import_s=import_s,
    )


def wait_for_end(store: RedisStore, pid: str, units: list[str], timeout_s: float) -> dict[str, str]:
    """Poll unit states (one MGET) until every unit is terminal."""
    deadline = time.monotonic() + timeout_s
    while True:
        statuses = {u: s.status for u, s in store.get_states(pid, units).items()}
        if all(s in TERMINAL for s in statuses.values()):
            return statuses
        if time.monotonic() > deadline:
            stuck = {u: s for u, s in statuses.items() if s not in TERMINAL}
            raise RuntimeError(f"gave up after {timeout_s:.0f} s; not finished: {stuck}")
        time.sleep(0.5)


# --- output -------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def table(s: dict[str, Any]) -> str:
    """The printed report."""
    c, o, parts = s["config"], s["overhead_ms"], s["overhead_parts_median_ms"]
    w = c["workers"]
    rows = [
        ("units passed", f"{s['passed']}/{s['units']} ({s['attempts']} attempts)", ""),
        ("makespan (enqueue -> last step)", f"{s['makespan_s']:.1f} s", ""),
        ("  of which import into Redis", f"{s['import_s']:.1f} s", ""),
        ("lower bound max(CP, work/W)", f"{s['lower_bound_s']:.1f} s", ""),
        ("  critical path (measured work)", f"{s['critical_path_s']:.1f} s", ""),
        (f"  total work / W (W={w})", f"{s['work_over_slots_s']:.1f} s", ""),
        (
            "makespan / lower bound",
            f"{s['ratio']:.3f}",
            f"<= {TARGET_RATIO}: {verdict(s['ratio'] <= TARGET_RATIO)}",
        ),
        (
            "overhead per attempt, median",
            f"{o['median']:.0f} ms",
            f"< {TARGET_OVERHEAD_MS:.0f} ms: {verdict(o['median'] < TARGET_OVERHEAD_MS)}",
        ),
        ("  p90 / mean", f"{o['p90']:.0f} / {o['mean']:.0f} ms", ""),
        ("  queue wait with a free slot", f"{parts['queue_wait_with_free_slot']:.0f} ms", ""),
        (
            "    per step: coder / tester / decide",
            " / ".join(f"{s['pickup_median_ms'][r]:.0f}" for r in ("coder", "tester", "decide"))
            + " ms",
            "",
        ),
        ("  materialize the views", f"{parts['materialize']:.0f} ms", ""),
        ("  commit the changes", f"{parts['commit']:.0f} ms", ""),
        ("  decide", f"{parts['decide']:.0f} ms", ""),
        ("  release -> chain sent", f"{parts['release']:.0f} ms", ""),
        ("outside the session, not overhead (*)", f"{parts['outside_session']:.0f} ms", ""),
        ("queue wait, all (median/attempt)", f"{s['queue_wait_total_median_ms']:.0f} ms", ""),
        (
            "idle slot time while work queued",
            f"{s['idle_slot_s_while_queued']:.1f} slot-s",
            f"= {1000 * s['idle_slot_s_while_queued'] / s['attempts']:.0f} ms/attempt",
        ),
        (
            "step median coder / tester",
            f"{s['step_median_ms']['coder']:.0f} / {s['step_median_ms']['tester']:.0f} ms",
            "",
        ),
        (
            "  of which session",
            f"{s['session_median_ms']['coder']:.0f} / {s['session_median_ms']['tester']:.0f} ms",
            "",
        ),
        ("  pytest run (in tester session)", f"{s['test_run_median_ms']:.0f} ms", ""),
        (
            "CPU busy during the run, all",
            f"{100 * s['cpu_busy_share']:.0f}% of {s['cpus']} CPUs",
            "",
        ),
        (
            "  this bench's processes (**)",
            f"{100 * s['fleet_cpu_share']:.0f}% ({s['fleet_cpu_s']:.0f} CPU-s)",
            "",
        ),
        (
            "  other processes (**)",
            f"{100 * s['other_cpu_share']:.0f}% ({s['other_cpu_s']:.0f} CPU-s)",
            "",
        ),
        ("  stub server + poller", f"{s['bench_process_cpu_s']:.0f} CPU-s", ""),
    ]
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    lines = [
        f"fleet: {s['units']} python units ({c['layers']} layers x {c['width']}, seed {c['seed']}),"
        f" W={w} worker slots, {c['latency_ms']} ms per model turn, 2 turns per session",
        *(f"{a:<{width}}  {b:>{vwidth}}  {t}".rstrip() for a, b, t in rows),
        "(*) step time minus session time, for reference: materialize and commit plus the",
        "    prompt build, the output payload and the view's cleanup.",
        "(**) neither counts sandboxed commands (pytest, py_compile): they are reparented to",
        "    PID 1, whose time cannot be split between this bench and other tenants.",
    ]
    others = s["other_cpu_share"]
    if others > 0.1:
        lines.append(
            f"note: other tenants' processes used at least {100 * others:.0f}% of the CPUs"
            " during the run (a shared machine): absolute times are inflated."
        )
    if s["cpu_busy_share"] > CPU_BOUND:
        lines.append(
            f"note: the CPUs were {100 * s['cpu_busy_share']:.0f}% busy: W={w} slots on"
            f" {s['cpus']} CPUs is CPU-bound at this turn latency, so step times, the work"
            " they add up to and the overhead include waiting for a CPU."
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=25)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--latency-ms", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout-s", type=float, default=1200)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    args = parser.parse_args()
    config = {k: getattr(args, k) for k in ("layers", "width", "workers", "latency_ms", "seed")}
    work = Path(tempfile.mkdtemp(prefix="devloop-bench-fleet-"))
    try:
        spec = work / "spec.yaml"
        spec.write_text(yaml.safe_dump(layered_spec(args.layers, args.width, args.seed)))
        project = work / "project"
        scaffold(spec, project, script=False)
        started = time.monotonic()
        run = run_fleet(work, project, args.workers, args.latency_ms, args.timeout_s)
        config["wall_s"] = round(time.monotonic() - started, 1)
        summary = summarize(run, args.workers, config)
    finally:
        if args.keep:
            print(f"work folder: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(table(summary))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0 if summary["passed"] == summary["units"] else 1


if __name__ == "__main__":
    sys.exit(main())
