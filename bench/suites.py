"""The runner's fidelity on real suites nobody here wrote: the same counts per status, the
same failing tests and the wall time, inside the sandbox (`PytestRunner`, as a tester's
`run_tests` runs it) and directly on the host with the same venv.

Each python suite is a PyPI sdist fetched at bench time (`pip download --no-binary`, never
copied into the repository), laid out as a unit: the package under code/, its test dir as
tests/. The node suite is zod's own vitest tests from its npm tarball (`npm pack`): its
src/ as code/, src/v4/classic/tests as tests/, each import of zod by its package name
(`zod/v4`) or of a file beside the tests rewritten to the path under code/ (a unit's tests
import its code by path), and the files that need packages the toolchain lacks left out,
named. Direct vitest runs from the toolchain on the host with the runner's settings.
It is run clean and with one deliberate one-line bug (the first mutant of its code, in
devloop/runners/mutants_py.py's order, that turns the direct run red).

The sandboxed run skips the tamper check (a library's code installs signal handlers and
hooks the interpreter, which a unit's code may not): how many places it would refuse is
reported per suite. Direct counts come from pytest's own summary line (`12 passed,
2 skipped, 1 xfailed`) and vitest's JSON report; failing names from junit and that report.
Prints a table and writes bench/out/suites.json. Target: counts equal per status on every
suite, the same failing test names, and sandbox wall time at most 1.3x direct.
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

from devloop.core.config import load_settings
from devloop.project.toolchain import node_toolchain, python_toolchain
from devloop.runners import PytestRunner, VitestRunner, mutants_py, tamper
from devloop.runners.base import TestRunner, code_sources
from devloop.runners.pytest import node_id
from devloop.safe.cachedir import cache_root
from devloop.sandbox import BwrapSandbox, new_view_dir

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


def sandboxed(runner: TestRunner, view: Path, run: str) -> tuple[dict[str, Any], float]:
    """The runner's result.json for one run, and its wall time. Run as a derived build:
    a library's own code installs signal handlers and hooks the interpreter, which the
    tamper check refuses in a unit's code (reported apart, see `tamper`); coverage is
    left out too, as direct runs have none."""
    started = time.monotonic()
    outcome = runner.run(view=view, unit_id=UNIT, run_id=run, attempt=1, retry_budget_left=0,
                         timeout_s=600, derived=True)
    return outcome.result.to_json_dict(), time.monotonic() - started


def compare(result: dict[str, Any], out: dict[str, int], failing_out: set[str],
            wall_in: float, wall_out: float) -> dict[str, Any]:
    """One run in and out of the sandbox, side by side."""
    failing_in = {f["test"] for f in result["failures"]}
    return {
        "in": statuses(result), "out": out,
        "same_counts": statuses(result) == out,
        "same_failing": failing_in == failing_out,
        "only_in": sorted(failing_in - failing_out)[:10],
        "only_out": sorted(failing_out - failing_in)[:10],
        "failing": len(failing_out), "crashed": result.get("crash_reason"),
        "wall_in_s": round(wall_in, 2), "wall_out_s": round(wall_out, 2),
        "ratio": round(wall_in / wall_out, 2) if wall_out else None,
    }


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
                row[label] = compare(result, out, failing_out, wall_in, wall_out)
            return row
        finally:
            shutil.rmtree(view, ignore_errors=True)

ZOD = ("zod", "4.6.7")
ZOD_TESTS = "src/v4/classic/tests"
# What zod's tests import it as -> the file under code/ (its package.json's exports).
ZOD_NAMES = {"zod": "index.ts", "zod/v4": "v4/index.ts", "zod/v4/core": "v4/core/index.ts",
             "zod/mini": "mini/index.ts", "zod/v3": "v3/index.ts"}
_SPEC = re.compile(r"""(from\s+|import\s*\(\s*)(["'])([^"']+)\2""")


def fetch_npm(name: str, version: str, into: Path) -> Path:
    """`npm pack` the package and unpack it; the unpacked `package/` dir."""
    subprocess.run(["npm", "pack", "--silent", f"{name}@{version}", "--pack-destination",
                    str(into)], check=True, capture_output=True, timeout=300)
    [archive] = into.glob("*.tgz")
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "package"


def zod_layout(package: Path, unit: Path, toolchain: Path) -> tuple[list[str], list[str]]:
    """code/ and tests/ from zod's tarball; the test files kept and the ones left out
    (they import packages the toolchain lacks)."""
    shutil.copytree(package / "src", unit / "code",
                    ignore=shutil.ignore_patterns("tests"))
    (unit / "tests").mkdir()
    kept, dropped = [], []
    for test in sorted((package / ZOD_TESTS).glob("*.test.ts")):
        text, missing = _rewrite(test.read_text(), toolchain)
        if missing:
            dropped.append(f"{test.name} ({', '.join(sorted(missing))})")
            continue
        (unit / "tests" / test.name).write_text(text)
        kept.append(test.name)
    return kept, dropped


def _rewrite(text: str, toolchain: Path) -> tuple[str, set[str]]:
    """The test with zod's own imports pointed under code/; the packages it lacks."""
    missing: set[str] = set()

    def point(match: re.Match[str]) -> str:
        head, quote, spec = match.groups()
        if spec in ZOD_NAMES:
            spec = f"../code/{ZOD_NAMES[spec]}"
        elif spec.startswith("."):  # beside the tests in src/v4/classic/tests
            spec = "../code/" + str(Path("v4/classic/tests", spec)).replace("\\", "/")
            spec = str(Path(spec)).replace("code/v4/classic/tests/../", "code/v4/classic/")
        elif not spec.startswith("node:") and not (toolchain / spec.split("/")[0]).exists():
            missing.add(spec)
        return f"{head}{quote}{spec}{quote}"

    return _SPEC.sub(point, text), missing


DIRECT_CONFIG = """\
export default {
  cacheDir: '/tmp/devloop-vite-direct',
  test: { root: process.cwd(), include: ['tests/**/*.test.ts'], environment: 'node',
          globals: true, pool: 'forks', maxWorkers: 2, minWorkers: 1 },
};
"""


def direct_vitest(unit: Path, node_modules: Path) -> tuple[dict[str, int], set[str], float]:
    """vitest on the host from the toolchain: counts per status, failing names, wall."""
    link = unit / "node_modules"
    if not link.exists():
        link.symlink_to(node_modules)
    (unit / "direct.config.mjs").write_text(DIRECT_CONFIG)
    report = unit / "direct-report.json"
    started = time.monotonic()
    subprocess.run(["node", "node_modules/vitest/vitest.mjs", "run", "--config",
                    "direct.config.mjs", "--reporter=json", f"--outputFile.json={report}"],
                   cwd=unit, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    data = json.loads(report.read_text())
    report.unlink()
    counts = {"passed": data["numPassedTests"], "failed": data["numFailedTests"],
              "skipped": data["numPendingTests"], "todo": data["numTodoTests"]}
    failing = set()
    for file in data["testResults"]:
        rel = str(Path(file["name"]).relative_to(unit.resolve()))
        for test in file["assertionResults"]:
            if test["status"] == "failed":
                titles = [*test.get("ancestorTitles", []), test["title"]]
                failing.add(f"{rel}::{' > '.join(titles)}")
    return {k: v for k, v in counts.items() if v}, failing, wall


def zod_bug(unit: Path, node_modules: Path, tries: int) -> str | None:
    """Flip the first `===` of code/v4/core that makes a test fail (and loads); where."""
    _, clean, _ = direct_vitest(unit, node_modules)
    for path in sorted((unit / "code/v4/core").glob("*.ts")):
        lines = path.read_text().splitlines(keepends=True)
        for i, line in enumerate(lines):
            if " === " not in line or tries <= 0:
                continue
            tries -= 1
            mutated = [*lines[:i], line.replace(" === ", " !== ", 1), *lines[i + 1 :]]
            path.write_text("".join(mutated))
            counts, failing, _ = direct_vitest(unit, node_modules)
            if failing - clean:
                return f"{path.relative_to(unit)}:{i + 1} === -> !=="
            path.write_text("".join(lines))
    return None


def measure_zod(node_modules: Path, tries: int) -> dict[str, Any]:
    """zod's classic tests, clean and with a bug, in the sandbox and directly."""
    settings = load_settings()
    runner = VitestRunner(BwrapSandbox(settings), node_modules)
    with tempfile.TemporaryDirectory() as tmp:
        package = fetch_npm(*ZOD, Path(tmp))
        view = new_view_dir(settings, prefix="suite-zod-")
        try:
            unit = view / "units" / UNIT
            kept, dropped = zod_layout(package, unit, node_modules)
            row: dict[str, Any] = {"suite": f"{ZOD[0]} {ZOD[1]}", "dropped": dropped,
                                   "files": len(kept), "tamper": None}
            for label in ("clean", "bug"):
                if label == "bug":
                    row["bug_at"] = zod_bug(unit, node_modules, tries)
                    if row["bug_at"] is None:
                        break
                out, failing_out, wall_out = direct_vitest(unit, node_modules)
                (unit / "node_modules").unlink()  # the sandbox binds the toolchain itself
                result, wall_in = sandboxed(runner, view, f"run-{label}")
                row[label] = compare(result, out, failing_out, wall_in, wall_out)
            return row
        finally:
            shutil.rmtree(view, ignore_errors=True)



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", action="append", help="only these (by name)")
    parser.add_argument("--tries", type=int, default=12, help="mutants tried per file for a bug")
    args = parser.parse_args()
    settings = load_settings()
    venv = python_toolchain(cache_root(settings))
    runner = PytestRunner(BwrapSandbox(settings), venv)
    rows = [measure(s, runner, venv, args.tries) for s in SUITES
            if not args.suite or s.name in args.suite]
    if not args.suite or ZOD[0] in args.suite:
        rows.append(measure_zod(node_toolchain(cache_root(settings)) / "node_modules", args.tries))
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
                  f"{r['ratio']}x  {row['tamper'] if row['tamper'] is not None else '-'}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "suites": rows}, indent=2))
    ok = all(r[k]["same_counts"] and r[k]["same_failing"] for r in rows for k in ("clean", "bug")
             if isinstance(r.get(k), dict))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
