"""The chaos soak: a 32-unit project in 4 layers through `devloop run` with 3 workers, while
workers are SIGKILLed (8 times), the embedded Redis is SIGKILLed once, a worker is paused past
its lease once, and the run gets SIGTERM and is started again. Prints each fault with the time
the run took to recover from it, the invariants, and the makespan against the same project
run without faults; writes bench/out/chaos.json. Exit 1 if an invariant fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the harness lives with the tests

from tests.chaos.harness import (  # noqa: E402
    Chaos,
    ChaosPlan,
    chaos_project,
    invariants,
    report,
)

OUT = ROOT / "bench" / "out" / "chaos.json"


def main() -> int:
    """Run the clean baseline and the chaos run; print and write what happened."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=8)
    args = parser.parse_args()
    plan = ChaosPlan(layers=args.layers, width=args.width, worker_kills=args.kills)
    calm = ChaosPlan(layers=args.layers, width=args.width, worker_kills=0, redis_kills=0,
                     pauses=0, sigterm=False)
    with tempfile.TemporaryDirectory(prefix="devloop-chaos-", dir="/var/tmp") as tmp:
        started = time.monotonic()
        baseline = Chaos(chaos_project(Path(tmp) / "calm", calm), calm).go()
        print(f"without faults: {time.monotonic() - started:.1f} s, exit {baseline.exits}")
        project = chaos_project(Path(tmp) / "chaos", plan)
        result = Chaos(project, plan).go(timeout_s=1800)
        checks = invariants(project, result.pids)
    print(report(result, checks))
    ratio = result.makespan_s / baseline.makespan_s
    print(f"makespan {result.makespan_s:.1f} s with faults against {baseline.makespan_s:.1f} s "
          f"without: {ratio:.2f}x")
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({
        "units": args.layers * args.width,
        "faults": [asdict(f) for f in result.faults],
        "exits": result.exits,
        "makespan_s": result.makespan_s,
        "baseline_makespan_s": baseline.makespan_s,
        "invariants": {name: not problems for name, problems in checks.items()},
    }, indent=2))
    return 1 if any(checks.values()) or result.exits[-1] != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
