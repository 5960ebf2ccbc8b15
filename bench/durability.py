"""What each AOF fsync policy costs a step: `always` (nothing acknowledged is lost) against
`everysec` (up to a second of writes lost in a crash of the machine) and `no`.

Replays the Redis writes of one coder step through the real store (lease and state in one
Lua call, the status mark, a checkpoint per turn, timeline entries, the commit, the step
record with the lease's release) against an embedded redis-server with AOF on, one per
policy, interleaved so drift hits all alike. Prints ms per step (median, p90) and writes
bench/out/durability.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, begin_step, save_step
from devloop.ledgers import Timeline
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState

OUT = Path(__file__).resolve().parent / "out" / "durability.json"
POLICIES = ("always", "everysec", "no")
TURNS = 6  # checkpoints per session; a real session has 5 to 60
TRANSCRIPT = "x" * 30_000  # a checkpoint of a few turns, in bytes


def one_step(store: RedisStore, n: int) -> None:
    """The writes of coder step n of a unit of its own."""
    pid, unit = "bench", f"u{n}"
    msg = StepMsg(pid=pid, unit_id=unit, attempt=1)
    store.put_state(pid, unit, UnitState(status="coding", attempt=1))
    begin_step(store, msg, "coder", "coder", "bench-worker", 60)
    store.cas_state(pid, unit, "coding", 1, UnitState(status="coding", attempt=1, tokens=1))
    timeline = Timeline(store.sink(pid, "timeline"))
    for turn in range(TURNS):
        store.save_session(pid, "coder", unit, {"turn": turn, "messages": TRANSCRIPT})
    timeline.append("unit_coded", unit_id=unit, summary="bench")
    store.commit_files(pid, unit, role="coder", attempt=1, base_version=0,
                       changes={f"code/f{i}.py": b"x = 1\n" * 300 for i in range(5)})
    record = StepRecord(role="coder", attempt=1, msg=msg, worker="bench-worker",
                        started_at=time.time(), ended_at=time.time())
    save_step(store, pid, unit, record, also=lambda pipe: store.queue_release(
        pipe, pid, unit, 1, "coder", "bench-worker"))


def main() -> None:
    """Measure, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--dir", type=Path, default=None,
                        help="where the AOF goes (default: a temp dir under /var/tmp)")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="devloop-aof-", dir=args.dir or "/var/tmp"))
    servers = {p: RedisServer(base / p, appendonly=True, appendfsync=p) for p in POLICIES}
    samples: dict[str, list[float]] = {p: [] for p in POLICIES}
    try:
        stores = {p: RedisStore(s.client()) for p, s in servers.items()}
        for n in range(args.steps):
            for policy in POLICIES:
                started = time.perf_counter()
                one_step(stores[policy], n)
                samples[policy].append((time.perf_counter() - started) * 1000)
    finally:
        for server in servers.values():
            server.close()
    rows = {
        p: {"median_ms": statistics.median(s), "p90_ms": sorted(s)[int(0.9 * (len(s) - 1))]}
        for p, s in samples.items()
    }
    print(f"{'appendfsync':<12} {'median ms/step':>15} {'p90 ms/step':>12}")
    for policy, row in rows.items():
        print(f"{policy:<12} {row['median_ms']:>15.2f} {row['p90_ms']:>12.2f}")
    extra = rows["always"]["median_ms"] - rows["everysec"]["median_ms"]
    print(f"always costs {extra:.2f} ms more per step than everysec (AOF under {base})")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"steps": args.steps, "turns": TURNS, "policies": rows}, indent=2))


if __name__ == "__main__":
    main()
