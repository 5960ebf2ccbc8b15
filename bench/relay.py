"""Requests per green unit when a careful model plays through the stub's relay (issue 29).

The README's quick start (`money`, then `cart` importing it) and the node example's first
two units (`todo-be`, `todo-fe`) run through `devloop run --llm anthropic` against
`devloop stub-llm --relay`'s server, answered by tests/relay_player.py's careful model: it
reads each request only through the relay's reader and writes only through its writer,
knowing beforehand just the files each unit ends with (the quick start's from
tests/workers/test_compose.py, the node example's replayed from examples/todo/stub.yaml).
Measured: requests per unit, the tokens the stub served, whether both units passed, and
anything a clean run should not show. Compared with the runs issue 29 reports, played by
hand before its fixes (33 and 19 requests), against its targets (at most 14 and 16).

Prints a table and writes bench/out/relay.json.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the careful model lives with the tests

from devloop.core.config import load_settings  # noqa: E402
from devloop.project.toolchain import node_toolchain, python_toolchain  # noqa: E402
from devloop.safe.cachedir import cache_root  # noqa: E402
from tests.relay_player import UnitPlan, plans_from_script, play_run  # noqa: E402
from tests.workers.test_compose import quick_start_spec  # noqa: E402
from tests.workers.test_relay_run import quick_start_plans  # noqa: E402

OUT = ROOT / "bench" / "out" / "relay.json"
DEVLOOP = str(Path(sys.executable).parent / "devloop")
# project -> (requests the hand-played run took before the fixes, the issue's target)
ISSUE = {"quick start": (33, 14), "node example": (19, 16)}


def node_spec() -> str:
    """examples/todo/spec.yaml with its first two units, as the issue's run had them."""
    spec = yaml.safe_load((ROOT / "examples/todo/spec.yaml").read_text())
    spec["units"] = [u for u in spec["units"] if u["id"] in ("todo-be", "todo-fe")]
    return yaml.safe_dump(spec, sort_keys=False)


def measure(name: str, spec: str, plans: dict[str, UnitPlan], work: Path) -> dict[str, object]:
    """One project played through the relay: its counts and verdict."""
    (work / "spec.yaml").write_text(spec)
    folder = work / "project"
    subprocess.run([DEVLOOP, "new", str(folder), "--from", str(work / "spec.yaml"),
                    "--no-script"], check=True, capture_output=True, timeout=120)
    started = time.monotonic()
    model, code, output = play_run(folder, work / "relay", plans, 900)
    passed = re.search(r"(\d+) passed, (\d+) blocked", output)
    per_unit = dict(model.per_unit())
    requests = sum(per_unit.values())
    before, target = ISSUE[name]
    return {"project": name, "exit": code, "passed": int(passed[1]) if passed else 0,
            "units": len(plans), "requests": requests, "per_unit": per_unit,
            "per_green_unit": requests / max(1, int(passed[1]) if passed else 0),
            "tokens": model.tokens, "before": before, "target": target,
            "ratio_vs_before": round(requests / before, 3), "meets_target": requests <= target,
            "surprises": model.surprises, "wall_s": round(time.monotonic() - started, 1)}


def main() -> None:
    settings = load_settings()
    python_toolchain(cache_root(settings))
    node_toolchain(cache_root(settings))
    todo = plans_from_script(ROOT / "examples/todo/stub.yaml", ["todo-be", "todo-fe"])
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench-relay-") as tmp:
        for name, spec, plans in [("quick start", quick_start_spec(), quick_start_plans()),
                                  ("node example", node_spec(), todo)]:
            work = Path(tmp) / name.replace(" ", "-")
            work.mkdir()
            runs.append(measure(name, spec, plans, work))
    head = (f"{'project':<14}{'passed':>8}{'requests':>10}{'per unit':>28}{'tokens':>10}"
            f"{'before':>8}{'ratio':>7}{'target':>14}")
    print(head)
    for run in runs:
        units = ", ".join(f"{u} {n}" for u, n in run["per_unit"].items())  # type: ignore[attr-defined]
        print(f"{run['project']:<14}{run['passed']:>5}/{run['units']:<2}{run['requests']:>10}"
              f"{units:>28}{run['tokens']:>10,}{run['before']:>8}{run['ratio_vs_before']:>7}"
              f"{'<= ' + str(run['target']) + (' ok' if run['meets_target'] else ' MISSED'):>14}")
        for surprise in run["surprises"]:  # type: ignore[attr-defined]
            print(f"  surprise: {surprise}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"runs": runs}, indent=1))
    print(f"written: {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
