"""The runner's fidelity on real suites nobody here wrote: the same counts per status, the
same failing tests and the wall time, inside the sandbox (`PytestRunner`, as a tester's
`run_tests` runs it) and directly on the host with the same venv.

Each suite is a PyPI sdist fetched at bench time (`pip download --no-binary`, never copied
into the repository), laid out as a unit: the package under code/, its test dir as tests/.
It is run clean and with one deliberate one-line bug (the first mutant of its code, in
devloop/runners/mutants_py.py's order, that turns the direct run red).

The sandboxed run skips the tamper check (a library's code installs signal handlers and
hooks the interpreter, which a unit's code may not): how many places it would refuse is
reported per suite. Direct counts come from pytest's own summary line (`12 passed,
2 skipped, 1 xfailed`); failing names from its junit report. Prints a table and writes
bench/out/suites.json. Target: counts equal per status on every suite, the same failing
test names, and sandbox wall time at most 1.3x direct.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devloop.config import load_settings
from devloop.runners import PytestRunner, mutants_py, tamper
from devloop.runners.base import code_sources
from devloop.runners.pytest import node_id
from devloop.sandbox import BwrapSandbox, new_view_dir
from devloop.toolchain import python_toolchain

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "suites.json"
UNIT = "suite"
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|warnings?)")


@dataclass(frozen=True)
class Suite:
    """A PyPI sdist and where its package and tests are inside it."""

    name: str
    version: str
    packages: tuple[tuple[str, str], ...]  # (path in the sdist, name under code/)
    tests: str  # path of the test dir in the sdist
    drop: tuple[str, ...] = ()  # test files needing what the sandbox lacks (named, not hidden)


SUITES = (
    Suite("boltons", "25.0.0", (("boltons", "boltons"),), "tests"),
    # (not pluggy: pytest imports it first, so its tests would test the venv's copy)
    Suite("click", "8.1.8", (("src/click", "click"),), "tests"),
    Suite("toolz", "1.0.0", (("toolz", "toolz"), ("tlz", "tlz")), "toolz/tests"),
    Suite("more-itertools", "10.7.0", (("more_itertools", "more_itertools"),), "tests"),
)


def fetch(suite: Suite, into: Path) -> Path:
    """Download and unpack the sdist; the unpacked dir."""
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
           "-d", str(into), f"{suite.name}=={suite.version}"]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    [archive] = [p for p in into.iterdir() if p.name.endswith((".tar.gz", ".zip"))]
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    [unpacked] = [p for p in into.iterdir() if p.is_dir()]
    return unpacked


def lay_out(suite: Suite, sdist: Path, unit: Path) -> list[str]:
    """units/suite/code and tests from the sdist; the code/ files (for the bug)."""
    for source, name in suite.packages:
        shutil.copytree(sdist / source, unit / "code" / name,
                        ignore=shutil.ignore_patterns("tests", "__pycache__"))
    shutil.copytree(sdist / suite.tests, unit / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", *suite.drop))
    return sorted(str(p.relative_to(unit)) for p in (unit / "code").rglob("*.py"))


def direct(unit: Path, venv: Path) -> tuple[dict[str, int], set[str], float]:
    """pytest on the host, as the runner calls it: its counts, failing names, wall time
    (counts empty when pytest itself broke: exit status other than 0 and 1)."""
    junit = unit / "direct-junit.xml"
    started = time.monotonic()
    done = subprocess.run(
        [str(venv / "bin/python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--rootdir=.", "-o", "pythonpath=code", "-o", "junit_family=xunit1",
         f"--junitxml={junit}", "tests"],
        cwd=unit, capture_output=True, text=True, timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"},
    )
    wall = time.monotonic() - started
    last = [ln for ln in done.stdout.splitlines() if ln.strip()][-1:] or [""]
    counts = {("errors" if k.startswith("error") else k): int(n)
              for n, k in _COUNT.findall(last[0]) if not k.startswith("warning")}
    if done.returncode not in (0, 1):  # an internal error, an interrupted run: no counts
        counts = {}
    failing = set()
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            if case.find("failure") is not None or case.find("error") is not None:
                failing.add(node_id(case))
        junit.unlink()
    return counts, failing, wall


def sandboxed(runner: PytestRunner, view: Path, run: str) -> tuple[dict[str, Any], float]:
    """The runner's result.json for one run, and its wall time. Run as a derived build:
    a library's own code installs signal handlers and hooks the interpreter, which the
    tamper check refuses in a unit's code (reported apart, see `tamper`); coverage is
    left out too, as direct runs have none."""
    started = time.monotonic()
    outcome = runner.run(view=view, unit_id=UNIT, run_id=run, attempt=1, retry_budget_left=0,
                         timeout_s=600, derived=True)
    return outcome.result.to_json_dict(), time.monotonic() - started


def statuses(result: dict[str, Any]) -> dict[str, int]:
    """Counts per status from result.json, made disjoint as pytest's summary line counts
    them: the seed summary holds errors among failed, xpassed among passed, xfailed and
    todo among skipped (result.json's `statuses`)."""
    summary = dict(result["summary"])
    finer = {k: v for k, v in (result.get("statuses") or {}).items() if isinstance(v, int)}
    summary["failed"] -= finer.get("errors", 0)
    summary["passed"] -= finer.get("xpassed", 0)
    summary["skipped"] -= finer.get("xfailed", 0) + finer.get("todo", 0)
    out = {k: summary[k] for k in ("passed", "failed", "skipped") if summary.get(k)}
    return out | {k: v for k, v in finer.items() if v}


def with_bug(unit: Path, files: list[str], venv: Path, tries: int) -> str | None:
    """Plant the first mutant that makes a test fail that did not (and breaks no
    collection); where it is (None: none did)."""
    _, clean, _ = direct(unit, venv)
    for rel in files:
        text = (unit / rel).read_text()
        for i in range(min(mutants_py.count(text), tries)):
            mutant = mutants_py.mutant(text, i)
            (unit / rel).write_text(mutant.source)
            counts, failing, _ = direct(unit, venv)
            if counts and failing - clean and not counts.get("errors"):  # a failure, no crash
                return f"{rel}:{mutant.line} {mutant.change}"
            (unit / rel).write_text(text)
    return None


def measure(suite: Suite, runner: PytestRunner, venv: Path, tries: int) -> dict[str, Any]:
    """Clean and buggy runs of one suite, in and out of the sandbox."""
    settings = load_settings()
    with tempfile.TemporaryDirectory() as tmp:
        sdist = fetch(suite, Path(tmp))
        view = new_view_dir(settings, prefix=f"suite-{suite.name}-")
        try:
            unit = view / "units" / UNIT
            files = lay_out(suite, sdist, unit)
            found = tamper.findings(code_sources(view, f"units/{UNIT}"))
            row: dict[str, Any] = {"suite": f"{suite.name} {suite.version}",
                                   "dropped": list(suite.drop), "tamper": len(found)}
            for label in ("clean", "bug"):
                if label == "bug":
                    row["bug_at"] = with_bug(unit, files, venv, tries)
                    if row["bug_at"] is None:
                        break
                out, failing_out, wall_out = direct(unit, venv)
                result, wall_in = sandboxed(runner, view, f"run-{label}")
                failing_in = {f["test"] for f in result["failures"]}
                row[label] = {
                    "in": statuses(result), "out": out,
                    "same_counts": statuses(result) == out,
                    "same_failing": failing_in == failing_out,
                    "only_in": sorted(failing_in - failing_out)[:10],
                    "only_out": sorted(failing_out - failing_in)[:10],
                    "failing": len(failing_out), "crashed": result.get("crash_reason"),
                    "wall_in_s": round(wall_in, 2), "wall_out_s": round(wall_out, 2),
                    "ratio": round(wall_in / wall_out, 2) if wall_out else None,
                }
            return row
        finally:
            shutil.rmtree(view, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", action="append", help="only these (by name)")
    parser.add_argument("--tries", type=int, default=12, help="mutants tried per file for a bug")
    args = parser.parse_args()
    settings = load_settings()
    venv = python_toolchain(settings.cache_dir)
    runner = PytestRunner(BwrapSandbox(settings), venv)
    rows = [measure(s, runner, venv, args.tries) for s in SUITES
            if not args.suite or s.name in args.suite]
    print(f"{'suite':24} {'run':5} {'in the sandbox':44} {'direct':44} same  wall in/out      "
          "tamper")
    for row in rows:
        for label in ("clean", "bug"):
            r = row.get(label)
            if r is None:
                print(f"{row['suite']:24} {label:5} (no mutant turned it red)")
                continue
            same = "yes" if r["same_counts"] and r["same_failing"] else "NO"
            print(f"{row['suite']:24} {label:5} {json.dumps(r['in']):44} "
                  f"{json.dumps(r['out']):44} {same:5} {r['wall_in_s']}/{r['wall_out_s']} s "
                  f"{r['ratio']}x  {row['tamper']}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "suites": rows}, indent=2))
    ok = all(r[k]["same_counts"] and r[k]["same_failing"] for r in rows for k in ("clean", "bug")
             if isinstance(r.get(k), dict))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
