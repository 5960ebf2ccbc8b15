"""How DevLoop's costs grow with the project: layered python projects of 1,000, 5,000 and
10,000 units (layers of 50, each unit depending on 1-3 of the layer before).

Per size: `devloop new` (CPU and peak memory), `devloop validate`, the import into Redis,
then, with Redis filled the way a finished run leaves it (bench/_scale_project.py) and the
folder exported once, the CPU seconds of one call of what touches the whole project: a
watch-loop poll when nothing changed (status, the export check), a frame of the live table,
`devloop status --json` and `devloop report`; with the growth exponent k (cost ~ N^k)
between sizes. The console's recompute is bench/console.py's. The scaffolded stub script
(bench/_scale_stub.py): its bytes a unit, the CPU and peak memory of parsing it and of loading
it again as `devloop run --llm stub` does (its check, then its stub), and a stub server's
memory before and after answering every unit's coder and tester sessions (at the first size
also with request bodies recorded, as the stub did before).
Then real `devloop run DIR --llm stub --workers 3` runs (bench/_scale_run.py): when the
first session starts, and the run process's CPU per unit beside its workers'; and, at the
largest size, the time to the first session alone (the run is interrupted then).

Each measurement is a small function calling the public API, so the table follows the code
it measures. Redis's own CPU is not counted in a call (it is another process). Prints a
table and writes bench/out/scale.json. `--only stub` measures `devloop new` and the stub
alone. Targets (issue 27): every per-call cost at most N^1.1 from 1,000 to 10,000 units; at
10,000 a poll and a live frame under 0.1 CPU-s, the report under 30 s, `devloop new` under
60 s and 1 GB, the first session of a stub run within 30 s of launch; the run's CPU at most
half the workers'.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _scale_project import COMPANY, DEVLOOP, PID, Template, fill, layered_spec, seed_run, write_spec
from _scale_run import real_run
from _scale_stub import measure as measure_stub
from rich.console import Console

from devloop.cli.run.live_view import live_view
from devloop.fleet.control import export_spend
from devloop.fleet.records import export_steps
from devloop.fleet.status import project_status
from devloop.project.load import load_project
from devloop.report.render import build_report
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "scale.json"
Cost = dict[str, float]


def child(argv: list[str]) -> Cost:
    """CPU seconds, wall seconds and peak RSS (MB) of one command run to its end."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr.read().decode()[-800:]}"
                           if proc.stderr else f"{argv} failed")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": time.perf_counter() - started,
            "rss_mb": usage.ru_maxrss / 1024}


def timed(call: Callable[[], object], repeat: int = 3, budget_s: float = 20.0) -> Cost:
    """The median CPU (and wall) seconds of up to `repeat` calls, fewer past budget_s."""
    cpu: list[float] = []
    wall: list[float] = []
    while len(cpu) < repeat and sum(cpu) < budget_s:
        c0, w0 = time.process_time(), time.perf_counter()
        call()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return {"cpu_s": statistics.median(cpu), "wall_s": statistics.median(wall), "n": len(cpu)}


# --- one function per thing measured: each calls what the product calls ------------------


def export_all(store: RedisStore, project: Path) -> None:
    """What a watch loop does when every unit changed: export files, step records, spend."""
    store.export(PID, project, as_source=True)
    export_steps(store, PID, project)
    export_spend(store, PID, project)


def poll(store: RedisStore, project: Path) -> Callable[[], object]:
    """One look of `devloop run`'s watch loop when nothing changed: status and the export
    check (devloop/cli/run/project_run.py's own function where it has one)."""
    import devloop.cli.run.project_run as run

    check = getattr(run, "_export_changes", None)
    versions: dict[str, int] = {}

    def look() -> None:
        nonlocal versions
        project_status(store, PID, folder=str(project))
        if check is not None:
            versions = check(store, PID, project, versions)

    look()  # the first look exports what is new; the ones measured find nothing changed
    return look


def live_frame(store: RedisStore, project: Path) -> Callable[[], object]:
    """One frame of the live table, drawn on a 120 x 50 terminal."""
    state = project_status(store, PID, folder=str(project))

    def frame() -> None:
        console = Console(file=io.StringIO(), width=120, height=50, force_terminal=True)
        console.print(live_view(state, footer="workers: 3/3 up"))

    return frame


def status_json(store: RedisStore, project: Path) -> None:
    """What `devloop status DIR --json` computes and prints."""
    project_status(store, PID, fleet=False, folder=str(project)).model_dump_json(indent=2)


# --- per size ------------------------------------------------------------------------------


def measure_size(n: int, work: Path, template: Template | None, skip: set[str],
                 record_too: bool) -> dict[str, Any]:
    """Every row of the table for one size (without a template: `new` and the stub only)."""
    here = work / f"n{n}"
    shutil.rmtree(here, ignore_errors=True)
    spec, project = write_spec(here / "spec.yaml", n), here / "project"
    costs: dict[str, Any] = {}

    def row(name: str, measure: Callable[[], Cost]) -> None:
        if name in skip:
            return
        try:
            costs[name] = measure()
        except Exception as exc:  # a call the code under test no longer has: say so, go on
            costs[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        shown = costs[name].get("cpu_s")
        print(f"  {n:>6} {name:<30} {shown if shown is None else round(shown, 3)}", flush=True)

    row("new", lambda: child([DEVLOOP, "new", str(project), "--from", str(spec)]))
    if "stub" not in skip:
        costs["stub"] = measure_stub(project, COMPANY, PID, record_too)
        print(f"  {n:>6} stub {json.dumps(costs['stub'])}", flush=True)
    if template is None:
        return costs
    row("validate", lambda: child([DEVLOOP, "validate", str(project)]))
    with RedisServer(here / "redis") as server:
        store = RedisStore.from_url(server.url)
        try:
            row("import", lambda: timed(lambda: store.import_project(load_project(project)),
                                        repeat=1))
            started = time.perf_counter()
            fill(store.client, template, layered_spec(n))
            costs["fill_wall_s"] = round(time.perf_counter() - started, 1)
            row("export_all", lambda: timed(lambda: export_all(store, project), repeat=1))
            row("poll", lambda: timed(poll(store, project)))
            row("live_frame", lambda: timed(live_frame(store, project)))
            row("status_json", lambda: timed(lambda: status_json(store, project)))
            row("report", lambda: timed(lambda: build_report(project), repeat=1))
        finally:
            store.close()
    return costs


ROWS = [
    ("new", "devloop new"), ("validate", "devloop validate"), ("import", "import into Redis"),
    ("export_all", "export, every unit changed"), ("poll", "watch-loop poll, none changed"),
    ("live_frame", "live table frame"), ("status_json", "status --json"),
    ("report", "devloop report"),
]
STUB_ROWS = [  # (key in the stub measures, label, format)
    ("bytes_per_unit", "stub.yaml: bytes a unit", "{:>10.0f}"),
    ("parse_cpu_s", "stub.yaml: parse, CPU-s", "{:>10.3f}"),
    ("parse_peak_mb", "stub.yaml: parse, peak RSS MB", "{:>10.0f}"),
    ("second_load_cpu_s", "stub.yaml: loaded again, CPU-s", "{:>10.4f}"),
    ("serve.loaded_mb", "stub server: RSS loaded, MB", "{:>10.0f}"),
    ("serve.requests", "stub server: requests answered", "{:>10,}"),
    ("serve.grew_mb", "stub server: RSS grew by, MB", "{:>10.1f}"),
    ("serve.bodies_kept", "stub server: bodies kept", "{:>10,}"),
    ("serve_recording.grew_mb", "  recording bodies: grew by, MB", "{:>10.1f}"),
]


def _pick(found: Any, path: str) -> Any:
    for part in path.split("."):
        found = found.get(part) if isinstance(found, dict) else None
    return found


def exponent(sizes: tuple[int, int], costs: tuple[float | None, float | None]) -> str:
    (n1, n2), (c1, c2) = sizes, costs
    if not c1 or not c2 or c1 <= 0 or c2 <= 0:
        return "-"
    return f"{math.log(c2 / c1) / math.log(n2 / n1):.2f}"


def _short(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def table(result: dict[str, Any]) -> str:
    """The per-call table with growth exponents, then the real runs."""
    sizes = [int(s) for s in result["sizes"]]
    by = result["sizes"]
    pairs = list(zip(sizes, sizes[1:], strict=False)) + (
        [(sizes[0], sizes[-1])] if len(sizes) > 2 else [])
    head = f"{'CPU-s per call':<34}" + "".join(f"{n:>10,}" for n in sizes) + "".join(
        f"{f'k {_short(a)}-{_short(b)}':>11}" for a, b in pairs)
    lines = [head]
    for key, name in ROWS:
        if not any(key in by[str(n)] for n in sizes):
            continue
        cpu = {n: by[str(n)].get(key, {}).get("cpu_s") for n in sizes}
        cells = "".join(f"{cpu[n]:>10.3f}" if cpu[n] is not None else f"{'-':>10}"
                        for n in sizes)
        ks = "".join(f"{exponent((a, b), (cpu[a], cpu[b])):>11}" for a, b in pairs)
        lines.append(f"{name:<34}{cells}{ks}")
    rss = "".join(f"{by[str(n)].get('new', {}).get('rss_mb', 0):>10.0f}" for n in sizes)
    lines.append(f"{'devloop new: peak RSS, MB':<34}{rss}")
    wall = "".join(f"{by[str(n)].get('new', {}).get('wall_s', 0):>10.1f}" for n in sizes)
    lines.append(f"{'devloop new: wall s (busy machine)':<34}{wall}")
    for key, name, form in STUB_ROWS:
        found = {n: _pick(by[str(n)].get("stub"), key) for n in sizes}
        if all(v is None for v in found.values()):
            continue
        cells = "".join(form.format(found[n]) if found[n] is not None else f"{'-':>10}"
                        for n in sizes)
        ks = "".join(f"{exponent((a, b), (found[a], found[b])):>11}" for a, b in pairs)
        lines.append(f"{name:<34}{cells}{ks if key.endswith('_s') else ''}")
    for run in result["runs"]:
        per_unit = (run["run_cpu_s"] / run["units"], run["worker_cpu_s"] / run["units"])
        lines.append(
            f"stub run, {run['units']:,} units, {run['workers']} workers: first session "
            f"{run['first_session_s']} s after launch, the run process's peak RSS "
            f"{run.get('run_peak_mb', 0):.0f} MB"
            + ("" if run.get("makespan_s") is None else
               f"; run {run['run_cpu_s']} CPU-s ({per_unit[0]:.3f}/unit), workers "
               f"{run['worker_cpu_s']} ({per_unit[1]:.3f}/unit), Redis {run['redis_cpu_s']}; "
               f"makespan {run['makespan_s']} s vs bound {run['lower_bound_s']} s")
            + (f" [{'; '.join(run['notes'])}]" if run["notes"] else ""))
    errors = [f"{n} {k}: {v['error']}" for n in sizes for k, v in by[str(n)].items()
              if isinstance(v, dict) and "error" in v]
    return "\n".join(lines + [f"error: {e}" for e in errors])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 10000])
    parser.add_argument("--run-sizes", type=int, nargs="*", default=[100, 1000],
                        help="real stub runs to the end")
    parser.add_argument("--first-session-sizes", type=int, nargs="*", default=[10000],
                        help="real stub runs stopped once the first session started")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--skip", nargs="*", default=[], help="rows to leave out")
    parser.add_argument("--only", choices=["stub", "all"], default="all",
                        help="stub: `devloop new` and the stub script only (no Redis)")
    parser.add_argument("--work", type=Path, default=None, help="kept afterwards when given")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    work = args.work or Path(f"/tmp/devloop-bench-scale-{os.getpid()}")
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "date": datetime.date.today().isoformat(), "cpus": os.cpu_count(),
        "load_before": os.getloadavg(), "sizes": {}, "runs": [],
    }
    try:
        template = None
        if args.only == "all":
            print("seed run (6 units, real stub run)...", flush=True)
            with seed_run(work) as seed:
                template = Template(RedisStore.from_url(seed.url).client)
        for n in args.sizes:
            result["sizes"][str(n)] = measure_size(n, work, template, set(args.skip),
                                                   record_too=n == args.sizes[0])
        runs = [(n, False) for n in args.run_sizes] + [(n, True) for n in
                                                        args.first_session_sizes]
        for n, first_only in runs:
            here = work / f"run{n}"
            shutil.rmtree(here, ignore_errors=True)
            spec = write_spec(here / "spec.yaml", n)
            subprocess.run([DEVLOOP, "new", str(here / "project"), "--from", str(spec)],
                           check=True, capture_output=True)
            print(f"real stub run at {n} units{' (to its first session)' * first_only}...",
                  flush=True)
            run = real_run(DEVLOOP, here / "project", PID, n, args.workers, here / "run.log",
                           stop_after_first=first_only)
            result["runs"].append(run.as_dict())
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    result["load_after"] = os.getloadavg()
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
