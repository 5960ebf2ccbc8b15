"""`PytestRunner`: a python unit's tests under pytest; the verdict from its channel.

The verdict comes from the `verdict_channel` plugin (devloop.runners.channel), checked
against pytest's exit status and its collected count; the JUnit XML only supplies each
failure's message and traceback, and must name the same tests failed and passed.

Tests import the unit's code by module name: `code/` is put on sys.path (`-o
pythonpath=code`, relative to the rootdir, which is the unit dir), so `code/todo.py` is
`import todo`. (`code` itself cannot be the package name: it shadows the stdlib module.)
The passed code of the units it depends on is on PYTHONPATH after the plugins, as
packages: `units.money` (devloop.upstream).
The default `prepend` import mode lets tests import helpers that sit next to them in
tests/. In the sandbox, with the test venv bound read-only at its own path:

    PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX=/tmp/pycache PYTHONHASHSEED=0
        PYTHONUNBUFFERED=1 VERDICT_FD=<fd>
        PYTHONPATH=<plugins>[:/upstream/python] DEVLOOP_COVERAGE_JSON=runs/{run}/coverage.json
        <venv>/bin/python -m coverage run --branch --source=code ...
        -m pytest -q --capture=tee-sys -p verdict_channel -p coverage_json
        -p no:cacheprovider --rootdir=. -o pythonpath=code -o verbosity_assertions=2
        -o junit_family=xunit1 --junitxml=runs/{run}/junit.xml tests
        (coverage_json writes the json report as the run ends: devloop.runners.coverage)
"""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from devloop.core.models import Failure, RunSummary
from devloop.project.toolchain import bytecode_binds
from devloop.runners import coverage as cov
from devloop.runners.base import (
    SLOT_WAIT_S,
    TIMEOUT_S,
    Parsed,
    RunOutcome,
    RunSpec,
    cache_dir_of,
    clean_stack,
    decisive_lines,
    finish,
    read_report,
    refuse_imports,
    refuse_tampering,
    tampered,
    with_source,
)
from devloop.runners.channel import (
    COVERAGE_PLUGIN,
    PYTEST_PLUGIN,
    Channel,
    OutputCount,
    Records,
    plugin_dir,
)
from devloop.runners.hints import build_hint
from devloop.runners.hollow import hollow_python_code
from devloop.runners.pyassert import expected_got, with_definitions
from devloop.runners.setup_fault import at_syntax_error, syntax_frame, tests_fault, unavailable
from devloop.runners.tamper import RAISED_IN_CODE
from devloop.runners.verdict import Exit, FileReport, disagreement, tally_pytest
from devloop.sandbox import Sandbox
from devloop.sandbox.base import PYCACHE_PREFIX
from devloop.sandbox.process import OutputSink
from devloop.sandbox.slots import run_slot
from devloop.upstream.mount import PYTHON_PATH, Upstream

# pytest's exit codes that mean the tests did not run as written.
CRASH_EXITS = {2: "was interrupted", 3: "hit an internal error", 4: "could not start (usage error)"}
NO_TESTS_EXIT = 5
_EXC_LINE = re.compile(r"^E\s+(\S.*)$", re.M)
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_FRAME = re.compile(r"^((?:code|tests)/\S+\.py):(\d+): in ", re.M)


class PytestRunner:
    """Runs a python unit's pytest suite in the sandbox with a read-only test venv."""

    def __init__(
        self,
        sandbox: Sandbox,
        venv: Path,
        upstream: Upstream | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.venv = venv
        self.cache_dir = cache_dir_of(venv)
        plugin_dir(self.cache_dir)  # made now, not on the first run
        # The passed code of the units this one depends on, importable as `units.<name>`.
        self.upstream = upstream

    @property
    def plugins(self) -> Path:
        """The verdict plugin dir, checked byte for byte against the package's at each use
        (and made again when it differs): its name alone proves nothing."""
        return plugin_dir(self.cache_dir)

    def run(
        self,
        *,
        view: Path,
        unit_id: str,
        run_id: str,
        attempt: int,
        retry_budget_left: int,
        timeout_s: float = TIMEOUT_S,
        on_output: OutputSink | None = None,
        derived: bool = False,
    ) -> RunOutcome:
        """Run `units/{unit_id}/tests` under pytest; see the module docstring."""
        spec = RunSpec(view, unit_id, run_id, attempt, retry_budget_left, timeout_s)
        spec.prepare()
        # A build derived from checked code (hollow, mutant) need not be checked again.
        if not derived and (
            refused := refuse_tampering(spec) or refuse_imports(spec, self.upstream)
        ):
            return refused
        python = shlex.quote(str(self.venv / "bin" / "python"))
        path = [str(self.plugins)] + ([PYTHON_PATH] if self.upstream and self.upstream.root else [])
        counted = OutputCount(on_output)  # marks where each test's output starts
        with run_slot(self.cache_dir, max_wait_s=SLOT_WAIT_S), Channel(counted) as channel:
            # tee-sys and an unbuffered stdout: what the tests print reaches the live view
            # while they run, and junit.xml still captures it per test.
            command = (
                # Bytecode caches outside the view, read nor written: a `__pycache__` there
                # (planted, or from before) never runs instead of the reviewed source.
                f"PYTHONDONTWRITEBYTECODE=1 PYTHONPYCACHEPREFIX={PYCACHE_PREFIX} "
                "PYTHONHASHSEED=0 PYTHONUNBUFFERED=1 "
                f"VERDICT_FD={channel.fd} PYTHONPATH={shlex.quote(':'.join(path))} "
                f"{python if derived else cov.python_run(python, spec.run_rel)} -m pytest -q "
                f"--capture=tee-sys -p {PYTEST_PLUGIN} "
                + ("" if derived else f"-p {COVERAGE_PLUGIN} ")
                + "-p no:cacheprovider --rootdir=. -o pythonpath=code "
                # Assertion values in full (pytest shortens them to ~240 chars otherwise);
                # expected/got are capped at pyassert.VALUE_CAP instead, saying so.
                "-o verbosity_assertions=2 "
                f"-o junit_family=xunit1 --junitxml={spec.run_rel}/junit.xml "
                f"-o faulthandler_timeout={dump_after(timeout_s):g} tests"
            )
            obs = self.sandbox.run(
                command,
                view=view,
                cwd=spec.unit_rel,
                writable=[spec.writable],
                timeout_s=timeout_s,
                # The venv's pyvenv.cfg and scripts name their own path: bind it at the
                # same one; the plugin dir likewise, read-only.
                ro_binds=[
                    (self.venv, str(self.venv)),
                    *bytecode_binds(self.venv),
                    (self.plugins, str(self.plugins)),
                    *(self.upstream.binds() if self.upstream else []),
                ],
                pass_fds=[channel.fd],
                on_output=counted,
            )
            stream = channel.close()
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
            elif parsed.crash_reason is None:
                parsed.crash_reason = check(parsed, stream, obs.exit_code)
                if parsed.crash_reason is None:
                    # The channel agrees with junit.xml and tells xpassed from passed
                    # (junit.xml alone lists a module skipped whole: pytest counts it).
                    parsed.outcomes.update(tally_pytest(stream.records).by_name())
                    parsed.summary = RunSummary.of(parsed.outcomes)
        coverage = None if obs.timed_out or derived else cov.python_coverage(spec)
        return finish(spec, parsed, obs, "pytest", tampered(stream.records), coverage, stream)

    def hollow_code(self, view: Path, unit_id: str) -> str | None:
        """Hollow code/**/*.py of a scratch view (host side: parsing runs nothing)."""
        return hollow_python_code(view, unit_id)


def dump_after(timeout_s: float) -> float:
    """Seconds a test may run before faulthandler dumps its stack to stderr (once): half
    the run's limit, so a test killed at the limit shows where it was."""
    return max(round(timeout_s / 2, 1), 0.5)


def check(parsed: Parsed, stream: Records, exit_code: int) -> str | None:
    """The channel's account against the exit status, the count and junit.xml."""
    tally = tally_pytest(stream.records)
    status = tally.end.get("status") if tally.end else None
    implied = Exit(status if isinstance(status, int) else None)
    # junit.xml tells errors and xfails apart, not xpasses (those are plain passes there).
    exact = {o: {t for t, x in parsed.outcomes.items() if x == o} for o in ("error", "xfailed")}
    report = FileReport(passed=parsed.passed, failed=parsed.failed, exact=exact)
    return disagreement(tally, stream.problems, exit_code, implied, report)


def parse_junit(raw: str | None, output: str, spec: RunSpec) -> Parsed:
    """pytest's JUnit XML -> summary, failures with hints, or a crash reason."""
    if raw is None:
        found = decisive_lines(output)
        return Parsed(crash_reason="pytest wrote no junit report" + (f": {found}" if found else ""))
    try:
        root = ET.fromstring(raw)
    except ET.ParseError as exc:
        return Parsed(crash_reason=f"pytest's junit report is not valid XML ({exc})")
    out = Parsed()
    crashes = []
    # junit lists a test that failed and whose teardown then raised twice: one test.
    cases: dict[str, list[ET.Element]] = {}
    for case in root.iter("testcase"):
        problem = _problem(case)
        if problem is not None and problem.get("message") == "collection failure":
            crashes.append(_collection_error(case, problem.text or ""))
            continue
        cases.setdefault(node_id(case), []).append(case)
    for name, entries in cases.items():
        outcome, problems = _junit_outcome(entries)
        out.outcomes[name] = outcome
        if problems:
            out.failures.append(_failure(name, problems, spec, outcome))
            out.failed.add(name)
        elif outcome == "passed":
            out.passed.add(name)
    out.summary = RunSummary.of(out.outcomes)
    if crashes:
        out.crash_reason = "; ".join(crashes[:3])
    return out


def _problem(case: ET.Element) -> ET.Element | None:
    """A testcase's <failure>, else its <error>, else None."""
    found = case.find("failure")
    return found if found is not None else case.find("error")


def _junit_outcome(entries: list[ET.Element]) -> tuple[str, list[ET.Element]]:
    """One test's outcome from its junit entries, and its failure/error elements (the
    test's own first, a teardown error after it)."""
    problems = [p for p in map(_problem, entries) if p is not None]
    if problems:
        return ("failed" if problems[0].tag == "failure" else "error"), problems
    skipped = entries[0].find("skipped")
    if skipped is not None:
        return ("xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"), []
    return "passed", []
def node_id(case: ET.Element) -> str:
    """`tests/test_x.py::TestY::test_z` from an xunit1 testcase."""
    file, name = case.get("file"), case.get("name", "?")
    classname = case.get("classname", "")
    if not file:
        return f"{classname}::{name}" if classname else name
    module = file.removesuffix(".py").replace("/", ".")
    inner = classname[len(module) :].lstrip(".") if classname.startswith(module) else ""
    return "::".join(p for p in (file, *inner.split("."), name) if p)


def _failure(name: str, problems: list[ET.Element], spec: RunSpec, outcome: str) -> Failure:
    """One failed (or erroring) test with expected/got, the code its failing line calls,
    and a hint; a teardown error that followed its failure is attached to its stack."""
    problem = problems[0]
    message = problem.get("message") or ""
    expected, got = extract_expected_got(message)
    texts = []
    for each in problems:
        text = each.text or each.get("message") or ""
        if each.tag == "error":  # "failed on setup with ..." says which phase broke
            text = f"{each.get('message') or ''}\n{text}"
        texts.append(text)
    # The hint is about the test's own failure; a teardown error after it is in the stack.
    raw = clean_stack(at_syntax_error(texts[0]))
    fault = tests_fault(name, outcome, message, raw, spec.unit_dir)
    own = with_definitions(with_source(raw, spec.unit_dir), spec.unit_dir)
    hint = fault or build_hint(name, expected, got, own)
    if len(texts) > 1:
        own = clean_stack(own + "\n\n" + "\n\n".join(texts[1:]))
        hint += " Its fixture's teardown failed too (in the stack, after the failure)."
    return Failure(
        test=name, expected=expected, got=got, stack=own, hint=hint,
        fault="tests" if fault else None,
    )


def _collection_error(case: ET.Element, text: str) -> str:
    """`pytest could not import tests/x.py: <the exception> (at code/y.py:3)`."""
    file = case.get("file") or case.get("name", "?").replace(".", "/") + ".py"
    errors = _EXC_LINE.findall(text)
    detail = errors[-1].strip() if errors else decisive_lines(text) or "collection failed"
    frames = [f"{m.group(1)}:{m.group(2)}" for m in _FRAME.finditer(text)]
    code = [f for f in frames if f.startswith("code/")]
    # A SyntaxError is where Python says it is, not at the line that imported its file.
    where = [syntax] if (syntax := syntax_frame(text)) else (code or frames)[-1:]
    reason = f"pytest could not import {file}: {detail}" + "".join(f" (at {w})" for w in where)
    missing = _NO_MODULE.search(detail)
    if missing and not code and frames and frames[-1].startswith("tests/"):
        reason += f"; {unavailable(missing.group(1))}"  # the tests' import: what there is
    innermost = syntax or (frames[-1] if frames else None)
    if innermost and innermost.startswith("code/"):
        # Raised in code/ (its innermost frame): no change to the tests can mend it.
        reason = f"{RAISED_IN_CODE} (at {innermost}): {reason}"
    return reason


def extract_expected_got(message: str) -> tuple[Any, Any]:
    """(expected, got) from `assert 500 == 400` (got on the left), unittest's `!=`, and the
    other assertion shapes as phrases (`is None`, `in [...]`, a bare value)."""
    return expected_got(message)
