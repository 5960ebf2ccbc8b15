"""How much the tests of each unit prove: criteria proven by tests that can fail, line and
branch coverage, the mutation score, and what the hollow run costs.

Both examples are run through the fleet (`devloop demo`, scripted turns, real sandbox and
runners); then, for every unit, its final tests are run again here against its final
code (the normal run) and against the hollow build (devloop/roles/hollowrun.py), each
timed end to end on the host, the median of --repeats. Python units also get a mutation
score over an evenly spaced sample of --mutants mutants. A project of deliberately weak
testers (a python unit whose double() is wrong, tested five lazy ways and once properly)
is measured the same way.

Prints a table and writes bench/out/adequacy.json. Target: the hollow run costs at most
1.0x extra (its wall time over the normal run's, per unit).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from devloop.core.config import load_settings
from devloop.core.sdd import parse_sections
from devloop.project.toolchain import node_toolchain, python_toolchain
from devloop.roles.adequacy import Claims
from devloop.roles.context import status_codes
from devloop.roles.hollowrun import hollow_check
from devloop.roles.mutation import mutation_score
from devloop.runners import PytestRunner, VitestRunner
from devloop.runners.base import TestRunner
from devloop.safe.cachedir import cache_root
from devloop.sandbox import BwrapSandbox, new_view_dir

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "adequacy.json"
CALC = '''def value():
    return 42


def double(x):
    return x
'''
WEAK = {
    "empty bodies": "def test_value_returns_42():\n    pass\n\n"
    "def test_double_4_returns_8():\n    pass\n",
    "assert True": "def test_value_returns_42():\n    assert True\n\n"
    "def test_double_4_returns_8():\n    assert True\n",
    "swallowed": "def test_value_returns_42():\n    try:\n        assert value() == 42\n"
    "    except Exception:\n        pass\n\ndef test_double_4_returns_8():\n    try:\n"
    "        assert double(4) == 8\n    except Exception:\n        pass\n",
    "no call into code/": "def test_value_returns_42():\n    assert 40 + 2 == 42\n\n"
    "def test_double_4_returns_8():\n    assert 4 * 2 == 8\n",
    "one real, one empty": "def test_value_returns_42():\n    assert value() == 42\n\n"
    "def test_double_4_returns_8():\n    pass\n",
    "proper (on right code)": "def test_value_returns_42():\n    assert value() == 42\n\n"
    "def test_double_4_returns_8():\n    assert double(4) == 8\n",
}
CALC_CRITERIA = ["value() returns 42", "double(4) returns 8"]


def demo(example: str, cwd: Path) -> Path:
    """Run a bundled example through the fleet; the folder it wrote."""
    subprocess.run(
        [sys.executable, "-m", "workers.main", "demo", "--example", example],
        cwd=cwd, check=True, stdout=subprocess.DEVNULL, timeout=900,
    )
    [folder] = sorted((cwd / "demo-out").glob(f"{example}-*"))
    return folder


def timed(fn: Any, repeats: int) -> tuple[Any, float]:
    """fn()'s last value and its median wall time over `repeats` calls."""
    walls, value = [], None
    for _ in range(repeats):
        started = time.monotonic()
        value = fn()
        walls.append(time.monotonic() - started)
    return value, statistics.median(walls)


def measure(runner: TestRunner, view: Path, unit: str, claims: Claims, args: Any) -> dict[str, Any]:
    """One unit: the normal run, the hollow run, coverage and mutation."""
    settings = load_settings()

    def normal() -> Any:
        return runner.run(view=view, unit_id=unit, run_id="bench-1", attempt=1,
                          retry_budget_left=0)

    real, real_wall = timed(normal, args.repeats)
    proof, hollow_wall = timed(lambda: hollow_check(runner, settings, view, real, claims),
                               args.repeats)
    row: dict[str, Any] = {
        "unit": unit,
        "green": real.result.ok,
        "criteria": len(claims.criteria),
        "proven": None,
        "cannot_fail": None,
        "run_s": round(real_wall, 3),
        "hollow_s": round(hollow_wall, 3),
        "extra": round(hollow_wall / real_wall, 2) if real_wall else None,
        "lines": None,
        "branches": None,
        "mutation": None,
    }
    if proof is not None and proof.measured:
        row["proven"] = sum(1 for p in proof.criteria if p.proving)
        row["cannot_fail"] = len(proof.cannot_fail)
    coverage = (real.result.model_extra or {}).get("coverage") or getattr(
        real.result, "coverage", None
    )
    if isinstance(coverage, dict):
        row["lines"], row["branches"] = coverage.get("lines"), coverage.get("branches")
    elif coverage is not None:
        row["lines"] = getattr(coverage, "lines", None)
        row["branches"] = getattr(coverage, "branches", None)
    if claims.stack == "python" and real.result.ok:
        score = mutation_score(runner, settings, view, unit, n=args.mutants)
        row["mutation"] = score.score
        row["mutants"] = f"{score.killed}/{score.run} of {score.sites}"
    return row


def example_rows(folder: Path, runners: dict[str, TestRunner], args: Any) -> list[dict[str, Any]]:
    """Every unit of an example folder the fleet ran, measured here."""
    units = json.loads((folder / "units.json").read_text())
    sections = {
        s.unit_id: s
        for html in sorted((folder / "sdd").rglob("*.html"))
        for s in parse_sections(html.read_text(), str(html))
    }
    rows = []
    for entry in units["units"]:
        unit, stack = entry["id"], entry.get("stack") or units.get("stack", "python")
        spec = json.loads((folder / "units" / unit / "spec.json").read_text())
        section = sections.get(unit)
        contract = json.loads(section.contract_text) if section and section.contract_text else None
        claims = Claims(stack, spec["acceptance_criteria"], status_codes(contract))
        view = new_view_dir(load_settings(), prefix="bench-adequacy-")
        try:
            shutil.copytree(folder / "units" / unit, view / "units" / unit, dirs_exist_ok=True)
            shutil.rmtree(view / "units" / unit / "runs", ignore_errors=True)
            row = measure(runners[stack], view, unit, claims, args)
        finally:
            shutil.rmtree(view, ignore_errors=True)
        rows.append({"project": folder.name.rsplit("-", 2)[0], **row})
    return rows


def weak_rows(runner: TestRunner, args: Any) -> list[dict[str, Any]]:
    """The calc unit under each weak tester (and a proper one, on right code)."""
    rows = []
    for name, tests in WEAK.items():
        code = CALC.replace("return x\n", "return x * 2\n") if name.startswith("proper") else CALC
        view = new_view_dir(load_settings(), prefix="bench-weak-")
        try:
            for rel, text in (("code/calc.py", code),
                              ("tests/test_calc.py", "from calc import double, value\n" + tests)):
                path = view / "units" / "calc" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            row = measure(runner, view, "calc", Claims("python", CALC_CRITERIA), args)
        finally:
            shutil.rmtree(view, ignore_errors=True)
        rows.append({"project": f"weak: {name}", **row})
    return rows


def show(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mutants", type=int, default=8)
    args = parser.parse_args()
    settings = load_settings()
    sandbox = BwrapSandbox(settings)
    runners: dict[str, TestRunner] = {
        "python": PytestRunner(sandbox, python_toolchain(cache_root(settings))),
        "node": VitestRunner(sandbox, node_toolchain(cache_root(settings)) / "node_modules"),
    }
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-adequacy-") as tmp:
        for example in ("todo", "inventory"):
            rows += example_rows(demo(example, Path(tmp)), runners, args)
    rows += weak_rows(runners["python"], args)
    columns = ["project", "unit", "green", "criteria", "proven", "cannot_fail", "lines",
               "branches", "mutation", "run_s", "hollow_s", "extra"]
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(show(row.get(c)) for c in columns))
    extras = [r["extra"] for r in rows if r["extra"] is not None and r["green"]]
    print(f"hollow run extra wall time: median {statistics.median(extras):.2f}x, "
          f"max {max(extras):.2f}x (target: at most 1.0x)")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"rows": rows, "extra_median": statistics.median(extras),
                               "extra_max": max(extras)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
