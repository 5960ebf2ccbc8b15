"""CPU per call of the library's project-wide operations on layered projects of 1,000,
5,000 and 10,000 units (bench/_layered.py), and how each grows with the project.

    .venv/bin/python bench/scale_core.py [--sizes 1000,5000,10000] [--only report,new]

Each operation runs in a fresh process (its own peak RSS, no warm caches from another
size) against one private redis-server. CPU is this process's (time.process_time), not
wall time: the machine is shared. Redis's own CPU for the call is shown beside it (INFO).

    new          `devloop new --no-script`: scaffold from the spec YAML (the stub script is
                 not the scaffold's cost), with the process's peak RSS
    validate     what `devloop validate` does: load the folder, check its sources, summarize
    import       RedisStore.import_project of the loaded project (first import)
    unit         UnitsFile.unit() for every unit of a freshly parsed units.json (what the
                 spec-change check, `validate`'s summary and the console's project page do)
    respec       the spec-change check `enqueue` and `run` make (fleet/respec.apply_changes)
    record       one project_record() call (a worker makes several per step)
    reconcile    one reconcile() pass over a finished run's states
    cascade      one root blocked: block_downstream over everything downstream of it
    (these five: the least CPU of three calls, the process's earlier objects frozen out
    of the GC first: see _best)
    report       `devloop report`: gather the finished run's folder and render the page

Prints a table (ms of CPU per call, and the growth exponent k of cost ~ N^k between the
smallest and largest size) and writes bench/out/scale_core.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from _layered import PID, finished_run, layered_graph, spec_yaml  # noqa: E402

OUT = ROOT / "bench" / "out" / "scale_core.json"
OPS = ("new", "validate", "import", "unit", "respec", "record", "reconcile", "cascade", "report")
SIZES = (1000, 5000, 10000)
TRIES = 3  # calls of each per-call operation; the least CPU is shown
ONCE = ("new", "validate", "report")  # whole commands, measured once per size


def _cpu(fn: Callable[[], Any], repeat: int = 1) -> tuple[float, Any]:
    """CPU seconds per call of fn (the mean of `repeat` calls) and its last value."""
    start = time.process_time()
    value = None
    for _ in range(repeat):
        value = fn()
    return (time.process_time() - start) / repeat, value


def _best(fn: Callable[[], Any], setup: Callable[[], Any] = lambda: None,
          client: Any = None, tries: int = TRIES) -> tuple[float, Any, dict[str, float]]:
    """The least CPU seconds of `tries` calls of fn, each after setup (not measured), the
    last call's value, and (given a client) its round trips, events written and Redis CPU.

    Before each call what the process holds (the loaded project, the record) is moved out
    of the cyclic GC's reach: otherwise a call's CPU includes whichever full collection
    falls into it, which walks every object of the process (a 10,000-unit project's
    models) and doubles a 10,000-unit cascade's cost at random; a long-running process
    pays those collections amortized over its calls.
    """
    best, value, seen = float("inf"), None, {}
    for _ in range(tries):
        setup()
        gc.collect()
        gc.freeze()
        if client is not None:
            xadds, redis_cpu = _xadds(client), _redis_cpu(client)
        trips = _Trips.count
        cpu, value = _cpu(fn)
        trips = _Trips.count - trips
        if client is not None:
            seen = {"round_trips": trips, "events": _xadds(client) - xadds,
                    "redis_cpu_s": _redis_cpu(client) - redis_cpu}
        best = min(best, cpu)
    return best, value, seen


def _peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM: unlike ru_maxrss, not the parent's peak
    carried over a fork)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _redis_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _xadds(client: Any) -> int:
    """XADD calls the server ran so far (scripts' own included): events written."""
    return int(client.info("commandstats").get("cmdstat_xadd", {}).get("calls", 0))


class _Trips:
    """Round trips to Redis this process makes: each send of a command or a pipeline."""

    count = 0

    @classmethod
    def install(cls) -> None:
        import redis.connection

        send = redis.connection.AbstractConnection.send_packed_command

        def counted(self: Any, command: Any, check_health: bool = True) -> None:
            cls.count += 1
            send(self, command, check_health)

        redis.connection.AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


def child(op: str, work: Path, url: str) -> dict[str, Any]:
    """Measure one operation in this (fresh) process."""
    from devloop.server.redis_server import connect
    from devloop.store import RedisStore

    project_dir = work / "project"
    out: dict[str, Any] = {}
    if op == "new":
        from devloop.scaffold import scaffold

        cpu, _ = _cpu(lambda: scaffold(work / "spec.yaml", project_dir, script=False))
        out["cpu_s"] = cpu
        out["rss_mb"] = _peak_rss_mb()
        return out
    from devloop.project.load import load_project, summarize

    if op == "validate":
        from devloop.store.snapshot import source_problems

        def validate() -> Any:
            project = load_project(project_dir)
            source_problems(project, 20 * 1024 * 1024)
            return summarize(project)

        out["cpu_s"], _ = _cpu(validate)
        out["rss_mb"] = _peak_rss_mb()
        return out
    if op == "report":
        from devloop.report.render import write_report

        out["cpu_s"], _ = _cpu(lambda: write_report(work / "run", work / "report.html"))
        out["rss_mb"] = _peak_rss_mb()
        return out
    project = load_project(project_dir)
    if op == "unit":
        from devloop.core.models import UnitsFile

        text, ids = project.units.model_dump_json(), [u.id for u in project.units.units]
        fresh: list[UnitsFile] = []

        def parse() -> None:  # a command's own parse, not measured: no index built yet
            fresh[:] = [UnitsFile.model_validate_json(text)]

        def every_unit() -> list[Any]:
            return [fresh[0].unit(u) for u in ids]

        out["cpu_s"], found, _ = _best(every_unit, parse)
        return {**out, "found": sum(1 for f in found if f is not None)}
    _Trips.install()
    client = connect(url)
    store = RedisStore(client)
    client.flushall()  # each operation on this size's project alone
    if op == "import":
        before = _redis_cpu(client)
        out["cpu_s"], _ = _cpu(lambda: store.import_project(project))
        out["redis_cpu_s"] = _redis_cpu(client) - before
        return out
    store.import_project(project)
    if op == "respec":
        from devloop.fleet.respec import apply_changes, record_definitions

        record_definitions(store, project)
        out["cpu_s"], _, seen = _best(lambda: apply_changes(store, project, str(project_dir)),
                                      client=client)
        return {**out, **seen}
    if op == "record":
        store.project_record(PID)  # the first read of a process parses; later ones reuse
        cpu, _, seen = _best(lambda: [store.project_record(PID) for _ in range(50)],
                             client=client)
        return {"cpu_s": cpu / 50, **{k: v / 50 for k, v in seen.items()}}
    from devloop.fleet.dispatch import block_downstream, reconcile

    store.project_record(PID)
    if op == "reconcile":
        out["cpu_s"], sent, seen = _best(lambda: reconcile(store, PID, grace_s=3600),
                                         lambda: _finished_states(store, project), client)
        return {**out, **seen, "sent": len(sent)}
    if op == "cascade":
        root = project.units.units[0].id
        out["cpu_s"], blocked, seen = _best(
            lambda: block_downstream(store, PID, root),
            lambda: store.put_states(PID, {u.id: _pending() for u in project.units.units}),
            client)
        return {**out, **seen, "blocked": len(blocked)}
    raise SystemExit(f"unknown operation {op}")


def _pending() -> Any:
    from devloop.store import UnitState

    return UnitState()


def _finished_states(store: Any, project: Any) -> None:
    """Every unit passed at attempt 1 but the last layer's, still pending."""
    from devloop.store import UnitState

    now = time.time()
    ids = [u.id for u in project.units.units]
    states = {u: UnitState(status="passed", attempt=1, started_at=now, updated_at=now)
              for u in ids[:-50]}
    states.update({u: UnitState() for u in ids[-50:]})
    store.put_states(PID, states)


def _prepare(size: int, work: Path) -> None:
    """The spec YAML and a finished run's folder (scaffolded once, outside the timing)."""
    from devloop.scaffold import scaffold

    graph = layered_graph(size)
    (work / "spec.yaml").write_text(spec_yaml(graph), encoding="utf-8")
    run = work / "run"
    scaffold(work / "spec.yaml", run, script=False)
    finished_run(run, graph)


def _run_child(op: str, work: Path, url: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", op, "--work", str(work), "--url", url],
        capture_output=True, text=True, timeout=3600,
    )
    if done.returncode != 0:
        raise SystemExit(f"{op} in {work} failed:\n{done.stdout}\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _measure(results: dict[str, dict[int, dict[str, Any]]], op: str, size: int, work: Path,
             url: str) -> None:
    """Run op on size in a fresh process; keep the result with the least CPU so far."""
    result = _run_child(op, work, url)
    if op not in results:
        return
    print(f"{op:>10} {size:>6}: {json.dumps(result)}", flush=True)
    kept = results[op].get(size)
    if kept is None or result["cpu_s"] < kept["cpu_s"]:
        results[op][size] = result


def exponent(small: float, large: float, n_small: int, n_large: int) -> float | None:
    """k in cost ~ N^k between two sizes (None when a cost is too small to tell)."""
    if small <= 0 or large <= 0:
        return None
    return math.log(large / small) / math.log(n_large / n_small)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--only", default=",".join(OPS))
    parser.add_argument("--child")
    parser.add_argument("--work", type=Path)
    parser.add_argument("--url")
    parser.add_argument("--out", type=Path, default=OUT, help="where the JSON goes")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the quick operations")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.work, args.url)))
        return
    from devloop.server.redis_server import RedisServer

    sizes = [int(s) for s in args.sizes.split(",")]
    ops = [o for o in OPS if o in args.only.split(",")]
    results: dict[str, dict[int, dict[str, Any]]] = {op: {} for op in ops}
    with tempfile.TemporaryDirectory(prefix="scale-core-") as tmp, \
            RedisServer(Path(tmp) / "redis") as server:
        works = {size: Path(tmp) / str(size) for size in sizes}
        for size, work in works.items():
            work.mkdir()
            _prepare(size, work)
            # `new` scaffolds work/project, which the later operations read.
            _measure(results, "new", size, work, server.url)
            for op in (o for o in ops if o in ONCE and o != "new"):
                _measure(results, op, size, work, server.url)
        # The quick operations round-robin over the sizes, `rounds` times, the least CPU
        # kept: on a shared machine the CPU a call takes drifts with what runs beside it.
        for _ in range(args.rounds):
            for size, work in works.items():
                for op in (o for o in ops if o not in ONCE):
                    _measure(results, op, size, work, server.url)
    _table(results, sizes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "results": results},
                              indent=2), encoding="utf-8")


def _table(results: dict[str, dict[int, dict[str, Any]]], sizes: list[int]) -> None:
    head = "".join(f"{n:>12,}" for n in sizes)
    print(f"\n{'CPU per call':<14}{head}{'k':>8}   (ms; k: cost ~ N^k, sizes "
          f"{sizes[0]:,} to {sizes[-1]:,})")
    for op, by_size in results.items():
        cells = "".join(f"{by_size[n]['cpu_s'] * 1000:>12,.1f}" for n in sizes)
        k = exponent(by_size[sizes[0]]["cpu_s"], by_size[sizes[-1]]["cpu_s"], sizes[0],
                     sizes[-1]) if len(sizes) > 1 else None
        extra = ""
        if "rss_mb" in by_size[sizes[-1]]:
            extra = f"   peak RSS {by_size[sizes[-1]]['rss_mb']:,.0f} MB"
        print(f"{op:<14}{cells}{'' if k is None else f'{k:8.2f}'}{extra}")


if __name__ == "__main__":
    main()
