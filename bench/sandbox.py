"""Wall time a sandbox adds to one command: bubblewrap against the same command run bare.

Runs `/bin/true` interleaved (so drift hits every variant alike), prints median and p90
per variant and the median added over `subprocess.run(["/bin/sh", "-c", "/bin/true"])`
with the same environment allowlist, and writes bench/out/sandbox.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from devloop.core.config import Settings
from devloop.sandbox import BareSandbox, BwrapSandbox, new_view_dir, sandbox_env

OUT = Path(__file__).resolve().parent / "out" / "sandbox.json"
TARGET_MS = 10.0
SH_TRUE = ["/bin/sh", "-c", "/bin/true"]
CODER_WRITE_SET = ["units/a/code", "units/a/contract.json", "units/a/coder.log"]


def percentile(samples: list[float], q: float) -> float:
    """The q-th percentile (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def variants(settings: Settings, view: Path) -> dict[str, Callable[[], object]]:
    """Each way of running /bin/true, as a no-argument callable."""
    env = sandbox_env()
    bare, bwrap = BareSandbox(settings), BwrapSandbox(settings)
    return {
        "subprocess true": lambda: subprocess.run(["/bin/true"], env=env, cwd=view, check=True),
        # The same command as the sandboxes run it (the Bash tool's `/bin/sh -c`).
        "subprocess sh -c": lambda: subprocess.run(SH_TRUE, env=env, cwd=view, check=True),
        "BareSandbox": lambda: bare.run("/bin/true", view=view, cwd=".", writable=[]),
        "BwrapSandbox": lambda: bwrap.run("/bin/true", view=view, cwd=".", writable=[]),
        "BwrapSandbox+writes": lambda: bwrap.run(
            "/bin/true", view=view, cwd="units/a", writable=CODER_WRITE_SET
        ),
    }


def main() -> None:
    """Measure, print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    runs = parser.parse_args().runs
    # BareSandbox warns on every run, by design; a benchmark does not need to hear it.
    logging.getLogger("devloop.sandbox.bare").setLevel(logging.ERROR)
    settings = Settings()
    view = new_view_dir(settings, prefix="bench-")
    (view / "units/a/code").mkdir(parents=True)
    for i in range(20):
        (view / f"units/a/code/f{i}.js").write_text("export {};\n")
    try:
        calls = variants(settings, view)
        for call in calls.values():  # warm up caches and the probe
            call()
        samples: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(runs):
            for name, call in calls.items():
                started = time.perf_counter()
                call()
                samples[name].append((time.perf_counter() - started) * 1000)
    finally:
        shutil.rmtree(view, ignore_errors=True)
    base = statistics.median(samples["subprocess sh -c"])
    rows = {
        name: {
            "median_ms": round(statistics.median(ms), 3),
            "p90_ms": round(percentile(ms, 90), 3),
            "added_median_ms": round(statistics.median(ms) - base, 3),
        }
        for name, ms in samples.items()
    }
    print(f"{'variant':<22}{'median ms':>11}{'p90 ms':>9}{'added ms':>10}   ({runs} runs each)")
    for name, row in rows.items():
        print(
            f"{name:<22}{row['median_ms']:>11.2f}{row['p90_ms']:>9.2f}{row['added_median_ms']:>10.2f}"
        )
    added = rows["BwrapSandbox"]["added_median_ms"]
    verdict = "ok" if added <= TARGET_MS else "OVER"
    print(f"bubblewrap adds {added:.2f} ms median over bare (target <= {TARGET_MS} ms): {verdict}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps({"runs": runs, "target_added_ms": TARGET_MS, "variants": rows}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
