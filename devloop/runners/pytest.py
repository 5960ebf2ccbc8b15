"""`PytestRunner`: a python unit's tests under pytest, read from its JUnit XML.

Tests import the unit's code by module name: `code/` is put on sys.path (`-o
pythonpath=code`, relative to the rootdir, which is the unit dir), so `code/todo.py` is
`import todo`. (`code` itself cannot be the package name: it shadows the stdlib module.)
The default `prepend` import mode lets tests import helpers that sit next to them in
tests/. In the sandbox, with the test venv bound read-only at its own path:

    PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 <venv>/bin/python -m pytest -q
        -p no:cacheprovider --rootdir=. -o pythonpath=code -o junit_family=xunit1
        --junitxml=runs/{run}/junit.xml tests
"""

from __future__ import annotations

import ast
import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from devloop.models import Failure, RunSummary
from devloop.runners.base import (
    TIMEOUT_S,
    Parsed,
    RunOutcome,
    RunSpec,
    clean_stack,
    decisive_lines,
    finish,
    read_report,
    with_source,
)
from devloop.runners.hints import build_hint
from devloop.sandbox import Sandbox

# pytest's exit codes that mean the tests did not run as written.
CRASH_EXITS = {2: "was interrupted", 3: "hit an internal error", 4: "could not start (usage error)"}
NO_TESTS_EXIT = 5
_EXC_LINE = re.compile(r"^E\s+(\S.*)$", re.M)
_FRAME = re.compile(r"^((?:code|tests)/\S+\.py):(\d+): in ", re.M)
_ASSERT = re.compile(r"^(?:AssertionError: )?assert (.+?) == (.+)$", re.M)
_UNITTEST = re.compile(r"^AssertionError: (.+?) != (.+)$", re.M)


class PytestRunner:
    """Runs a python unit's pytest suite in the sandbox with a read-only test venv."""

    def __init__(self, sandbox: Sandbox, venv: Path) -> None:
        self.sandbox = sandbox
        self.venv = venv

    def run(
        self,
        *,
        view: Path,
        unit_id: str,
        run_id: str,
        attempt: int,
        retry_budget_left: int,
        timeout_s: float = TIMEOUT_S,
    ) -> RunOutcome:
        """Run `units/{unit_id}/tests` under pytest; see the module docstring."""
        spec = RunSpec(view, unit_id, run_id, attempt, retry_budget_left, timeout_s)
        spec.prepare()
        python = shlex.quote(str(self.venv / "bin" / "python"))
        command = (
            f"PYTHONDONTWRITEBYTECODE=1 PYTHONHASHSEED=0 {python} -m pytest -q "
            "-p no:cacheprovider --rootdir=. -o pythonpath=code -o junit_family=xunit1 "
            f"--junitxml={spec.run_rel}/junit.xml tests"
        )
        obs = self.sandbox.run(
            command,
            view=view,
            cwd=spec.unit_rel,
            writable=[spec.writable],
            timeout_s=timeout_s,
            # The venv's pyvenv.cfg and scripts name their own path: bind it at the same one.
            ro_binds=[(self.venv, str(self.venv))],
        )
        parsed = Parsed()
        if not obs.timed_out:
            output = obs.stdout + "\n" + obs.stderr
            parsed = parse_junit(read_report(view, spec.run_file("junit.xml")), output, spec)
            if parsed.crash_reason is None and obs.exit_code == NO_TESTS_EXIT:
                parsed.crash_reason = (
                    "pytest collected no tests under tests/ (it looks for files test_*.py or "
                    "*_test.py holding functions test_* or classes Test* with methods test_*)"
                )
            elif parsed.crash_reason is None and obs.exit_code in CRASH_EXITS:
                found = decisive_lines(output)
                parsed.crash_reason = f"pytest {CRASH_EXITS[obs.exit_code]}: {found or '?'}"
        return finish(spec, parsed, obs, "pytest")


def parse_junit(raw: str | None, output: str, spec: RunSpec) -> Parsed:
    """pytest's JUnit XML -> summary, failures with hints, or a crash reason."""
    if raw is None:
        found = decisive_lines(output)
        return Parsed(crash_reason="pytest wrote no junit report" + (f": {found}" if found else ""))
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        return Parsed(crash_reason=f"pytest's junit report is not valid XML ({exc})")
    summary, failures, crashes = RunSummary(), [], []
    for case in root.iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None and problem.get("message") == "collection failure":
            crashes.append(_collection_error(case, problem.text or ""))
            continue
        summary.total += 1
        if problem is not None:
            summary.failed += 1
            failures.append(_failure(case, problem, spec))
        elif case.find("skipped") is not None:
            summary.skipped += 1
        else:
            summary.passed += 1
    if crashes:
        return Parsed(summary, failures, "; ".join(crashes[:3]))
    return Parsed(summary, failures)


def node_id(case: ET.Element) -> str:
    """`tests/test_x.py::TestY::test_z` from an xunit1 testcase."""
    file, name = case.get("file"), case.get("name", "?")
    classname = case.get("classname", "")
    if not file:
        return f"{classname}::{name}" if classname else name
    module = file.removesuffix(".py").replace("/", ".")
    inner = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
    return "::".join(p for p in (file, *inner.split("."), name) if p)


def _failure(case: ET.Element, problem: ET.Element, spec: RunSpec) -> Failure:
    """One failed (or erroring) test with expected/got and a hint."""
    name = node_id(case)
    message = problem.get("message") or ""
    expected, got = extract_expected_got(message)
    text = problem.text or message
    if problem.tag == "error":
        text = f"{message}\n{text}"  # "failed on setup with ..." says which phase broke
    stack = with_source(clean_stack(text), spec.unit_dir)
    return Failure(
        test=name,
        expected=expected,
        got=got,
        stack=stack,
        hint=build_hint(name, expected, got, stack),
    )


def _collection_error(case: ET.Element, text: str) -> str:
    """`pytest could not import tests/x.py: <the exception> (at code/y.py:3)`."""
    file = case.get("file") or case.get("name", "?").replace(".", "/") + ".py"
    errors = _EXC_LINE.findall(text)
    detail = errors[-1].strip() if errors else decisive_lines(text) or "collection failed"
    frames = [f"{m.group(1)}:{m.group(2)}" for m in _FRAME.finditer(text)]
    code = [f for f in frames if f.startswith("code/")]
    where = (code or frames)[-1:]
    return f"pytest could not import {file}: {detail}" + "".join(f" (at {w})" for w in where)


def extract_expected_got(message: str) -> tuple[Any, Any]:
    """(expected, got) from `assert 500 == 400` (got on the left) or unittest's `!=`."""
    m = _ASSERT.search(message) or _UNITTEST.search(message)
    if m is None:
        return None, None
    return py_literal(m.group(2)), py_literal(m.group(1))


def py_literal(text: str) -> Any:
    """A Python literal as a value; anything else (a repr) as pytest printed it."""
    text = text.strip()
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
