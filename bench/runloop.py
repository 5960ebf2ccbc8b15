"""`devloop run`'s watch loop at 1,000, 5,000 and 10,000 units: a look, a sync, a frame.

For each size a layered python project (layers of 50 units, each depending on 1-3 units of
the layer before) is imported into a private Redis and left as a finished scripted run
leaves it (bench/_runstate.py), with its folder holding what that run exported. Then,
measured in CPU seconds of this process (time.process_time; the machine is shared, wall
time is noise):

  load          the live status's full read (the start of a run, `devloop status`'s cost)
  poll, idle    a look of the live status and the folder sync after it, nothing changed
                (0.5 s apart, as `devloop run` looks: the consistency sweep reads its slice)
  poll, 3 moved the same after 3 units moved on as a step's end moves them (new state with
                its event, step records, a commit, timeline entries): their files exported,
                the records and ledger entries appended
  frame         one draw of the live view on a 120x50 terminal
  status        `project_status` (what `devloop status` reads), for reference

and the growth exponent of each from the smallest size to the largest (log c2/c1 over
log n2/n1; 1.0 is linear). Targets (issue 27): at 10,000 units a poll and a frame under
100 ms of CPU when little changed; every per-call cost growing at most as N^1.1.

Prints a table and writes bench/out/runloop.json. `--sizes 1000 5000` for fewer.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _runstate import fill_finished, import_project, layered_spec, touch, write_project
from rich.console import Console

from devloop.cli.run.live_view import LiveView
from devloop.fleet.livestatus import LiveStatus
from devloop.fleet.status import project_status
from devloop.fleet.sync import FolderSync
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "runloop.json"
SIZES = (1000, 5000, 10_000)
POLL_S = 0.5
LOOKS = 8
TARGET_MS, TARGET_EXPONENT = 100.0, 1.1


def cpu_ms(call: Callable[[], object]) -> float:
    """CPU milliseconds of this process that call took."""
    start = time.process_time()
    call()
    return (time.process_time() - start) * 1000


def write_folder(store: RedisStore, pid: str, units: list[str], root: Path) -> None:
    """Put each unit's files in the folder as the finished run exported them (plain writes:
    the run's own export then finds them in place, as a resumed run does)."""
    for unit in units:
        for rel, data in store.unit_files(pid, unit).files.items():
            path = root / "units" / unit / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    (root / "agent-state").mkdir(exist_ok=True)
    for rel, data in store.agent_state(pid).items():
        (root / "agent-state" / rel).write_bytes(data)


def measure(n: int, work: Path) -> dict[str, Any]:
    """Every figure for one size."""
    with RedisServer(work / "redis") as server:
        store = RedisStore(server.client())
        started = time.monotonic()
        root = write_project(work / "p", layered_spec(n))
        pid, units = import_project(store, root)
        fill_finished(store, pid, units)
        write_folder(store, pid, units, root)
        setup_s = time.monotonic() - started
        tracker = LiveStatus(store, pid, folder=str(root))
        load_ms = cpu_ms(tracker.load)
        sync = FolderSync(store, pid, root)
        start_ms = cpu_ms(lambda: sync.start(tracker))

        def look() -> None:
            sync.sync(tracker, tracker.poll())

        idle = []
        for _ in range(LOOKS):
            time.sleep(POLL_S)
            idle.append(cpu_ms(look))
        moved = []
        for attempt in range(2, 2 + LOOKS):
            picked = [units[(attempt * 997 + k * 131) % n] for k in range(3)]
            touch(store, pid, picked, attempt)
            time.sleep(POLL_S)
            moved.append(cpu_ms(look))
        assert tracker.status is not None
        state, frames = tracker.status, []
        console = Console(file=io.StringIO(), width=120, height=50, force_terminal=True)
        for _ in range(LOOKS):
            frames.append(cpu_ms(lambda: console.print(LiveView(state, "workers: 3/3 up"))))
        status_ms = min(cpu_ms(lambda: project_status(store, pid, folder=str(root)))
                        for _ in range(2))
        lines = console.file.getvalue().count("\n") // LOOKS  # type: ignore[attr-defined]
    return {
        "units": n, "setup_s": round(setup_s, 1), "load_ms": round(load_ms, 1),
        "start_ms": round(start_ms, 1),
        "poll_idle_ms": round(statistics.median(idle), 2),
        "poll_moved_ms": round(statistics.median(moved), 2),
        "frame_ms": round(statistics.median(frames), 2), "frame_lines": lines,
        "status_ms": round(status_ms, 1),
    }


FIGURES = (("load_ms", "load (full read, once)"), ("start_ms", "first sync (export, once)"),
           ("poll_idle_ms", "poll, nothing moved"), ("poll_moved_ms", "poll, 3 units moved"),
           ("frame_ms", "frame (120x50)"), ("status_ms", "project_status (devloop status)"))
PER_LOOK = ("poll_idle_ms", "poll_moved_ms", "frame_ms")


def exponent(first: dict[str, Any], last: dict[str, Any], key: str) -> float:
    """How the figure grows with the units between two sizes (1.0: linear)."""
    if first[key] <= 0 or last[key] <= 0:
        return 0.0
    return math.log(last[key] / first[key]) / math.log(last["units"] / first["units"])


def table(rows: list[dict[str, Any]]) -> str:
    """The printed report."""
    sizes = [r["units"] for r in rows]
    head = f"{'CPU ms per call':<34}" + "".join(f"{n:>10,}" for n in sizes) + "  exponent"
    lines = [head]
    for key, label in FIGURES:
        exp = exponent(rows[0], rows[-1], key) if len(rows) > 1 else 0.0
        note = ""
        if key in PER_LOOK:
            ok = rows[-1][key] < TARGET_MS and exp <= TARGET_EXPONENT
            note = f"  (< {TARGET_MS:.0f} ms, <= N^{TARGET_EXPONENT}: {'met' if ok else 'MISSED'})"
        lines.append(f"{label:<34}" + "".join(f"{r[key]:>10.1f}" for r in rows)
                     + f"  {exp:8.2f}{note}")
    lines.append(f"{'frame lines':<34}" + "".join(f"{r['frame_lines']:>10}" for r in rows))
    lines.append(f"{'setup (wall s, not measured)':<34}"
                 + "".join(f"{r['setup_s']:>10.0f}" for r in rows))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args()
    rows = []
    for n in sorted(args.sizes):
        with tempfile.TemporaryDirectory(prefix=f"runloop-{n}-") as tmp:
            rows.append(measure(n, Path(tmp)))
            print(f"measured {n:,} units", file=sys.stderr, flush=True)
    print(table(rows))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"date": datetime.now(UTC).isoformat(timespec="seconds"),
                               "cpus": os.cpu_count(), "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
