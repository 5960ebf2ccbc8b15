"""What the check of the embedded server's AOF costs, against the server's own replay.

Before the embedded server starts, devloop/server/redis_data.py reads every file it would replay
and refuses a command DevLoop never writes. This benchmark builds AOFs of DevLoop's write
mix (a step: unit files as HSETs of 1-6 KB, a state SET and a stream XADD in MULTI/EXEC,
a task pushed and popped, counters, the unacked index) of several sizes, and takes real
state dirs too (`--state DIR`: a `devloop run`'s `.devloop/`, or the `redis/` dir
`bench/fleet.py --keep` leaves). For each it measures the check alone and a whole server
start on the same files (the check, then the server's replay until it answers), median
of 3, and the check's share of the start.

Prints a table and writes bench/out/aof_check.json. The check's cost is per logged
command (its framing), the replay's per command and byte: a dense AOF of small commands
is the worst case for the check.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from devloop.server.redis_data import AOF_DIR, MANIFEST, check_data_dir
from devloop.server.redis_server import RedisServer, server_build

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "aof_check.json"


def resp(*args: bytes) -> bytes:
    """One command as the server logs it."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def step(rng: random.Random, n: int) -> bytes:
    """The writes of one coder or tester step, roughly as a real run's AOF has them."""
    unit = b"u%d" % (n % 100)
    files = b"".join(resp(b"HSET", b"devloop:p:unit:" + unit + b":files", b"code/f%d.py" % i,
                          rng.randbytes(rng.randint(512, 3072)).hex().encode())
                     for i in range(rng.randint(1, 3)))
    return (resp(b"MULTI") + files
            + resp(b"SET", b"devloop:p:unit:" + unit + b":state", b"{" + b"x" * 300 + b"}")
            + resp(b"XADD", b"devloop:p:stream:events", b"MAXLEN", b"=", b"1000",
                   b"%d-0" % n, b"kind", b"state", b"unit", unit)
            + resp(b"EXEC")
            + resp(b"LPUSH", b"tester", b"{" + b"t" * 1800 + b"}") + resp(b"RPOP", b"tester")
            + resp(b"ZADD", b"unacked_index", b"%d" % n, b"tag%d" % n)
            + resp(b"ZREM", b"unacked_index", b"tag%d" % n)
            + resp(b"HINCRBY", b"devloop:p:spend", b"total", b"1000"))


def synthetic(where: Path, megabytes: int, seed: int) -> Path:
    """A state dir in the server's directory layout with about `megabytes` of steps."""
    rng = random.Random(seed)
    aof_dir = where / AOF_DIR
    aof_dir.mkdir(parents=True, mode=0o700)
    (aof_dir / MANIFEST).write_text("file appendonly.aof.1.base.aof seq 1 type b\n"
                                    "file appendonly.aof.1.incr.aof seq 1 type i\n")
    (aof_dir / "appendonly.aof.1.base.aof").write_bytes(b"")
    with (aof_dir / "appendonly.aof.1.incr.aof").open("wb") as out:
        out.write(resp(b"SELECT", b"0"))
        n = 0
        while out.tell() < megabytes * 2**20:
            out.write(step(rng, n))
            n += 1
    where.chmod(0o700)
    return where


def aof_bytes(state: Path) -> int:
    """The size of what the server replays from `state`."""
    return sum(p.stat().st_size for p in state.rglob("*.aof"))


def measure(state: Path, repeats: int) -> dict[str, float]:
    """Median seconds for the check alone and for a whole server start, each on a fresh copy
    of `state` (a start may rewrite the AOF it loaded)."""
    checks, starts = [], []
    for _ in range(repeats):
        copy = Path(tempfile.mkdtemp(prefix="devloop-bench-aof-")) / "state"
        shutil.copytree(state, copy, ignore=shutil.ignore_patterns("*.sock"))
        began = time.perf_counter()
        check_data_dir(copy, appendonly=True)
        checks.append(time.perf_counter() - began)
        began = time.perf_counter()
        server = RedisServer(copy, appendonly=True, startup_timeout_s=600)
        starts.append(time.perf_counter() - began)
        server.close()
        shutil.rmtree(copy.parent)
    check, start = statistics.median(checks), statistics.median(starts)
    return {"mb": round(aof_bytes(state) / 2**20, 1), "check_s": round(check, 3),
            "start_s": round(start, 3), "share": round(check / start, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[10, 100, 300],
                        help="synthetic AOF sizes in MB")
    parser.add_argument("--state", type=Path, action="append", default=[],
                        help="a real state dir to measure (copied first; repeatable)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = []
    work = Path(tempfile.mkdtemp(prefix="devloop-bench-aof-"))
    try:
        for size in args.sizes:
            state = synthetic(work / f"synthetic-{size}", size, args.seed)
            rows.append({"aof": f"synthetic {size} MB", **measure(state, args.repeats)})
        for real in args.state:
            rows.append({"aof": str(real), **measure(real, args.repeats)})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    width = max(len(r["aof"]) for r in rows)
    print(f"AOF check before a start, {server_build()}, median of {args.repeats}")
    print(f"{'aof':<{width}}  {'MB':>7}  {'check s':>8}  {'start s':>8}  share")
    for r in rows:
        print(f"{r['aof']:<{width}}  {r['mb']:>7}  {r['check_s']:>8}  {r['start_s']:>8}"
              f"  {r['share']:.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"server": str(server_build()), "rows": rows}, indent=2)
                        + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
