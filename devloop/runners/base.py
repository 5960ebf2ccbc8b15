"""What every test runner shares: the protocol, the outcome, crash verdicts, run files.

    TestRunner (protocol)   run(view=, unit_id=, run_id=, attempt=, ...) -> RunOutcome
    +-- VitestRunner        node units: a reporter on the channel, details from report.json
    +-- PytestRunner        python units: a plugin on the channel, details from junit.xml

A runner runs `units/{unit}/tests/**` against `units/{unit}/code/**` in its sandbox, with
cwd `units/{unit}` and only `units/{unit}/runs/{run}` writable, takes the verdict from the
channel once it agrees with the exit status and the report, and writes result.json,
stdout.txt and stderr.txt into that run dir from the host. Red tests, crashes, timeouts
and starved runs are results, never exceptions.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from pydantic import BaseModel, ConfigDict

from devloop.core.config import load_settings
from devloop.core.models import (
    SEED_COUNT,
    CodeCoverage,
    Failure,
    NextAction,
    NotRun,
    RunResult,
    RunStatuses,
    RunSummary,
    TestOutcome,
)
from devloop.runners import tamper, timing
from devloop.runners.channel import Records
from devloop.runners.verdict import DISAGREE
from devloop.safe.cachedir import cache_root
from devloop.safe.safedir import Dir
from devloop.safe.safetree import TooMany, walk
from devloop.sandbox import SANDBOX_ROOT, Observation
from devloop.sandbox.base import in_view
from devloop.sandbox.process import OutputSink
from devloop.store.filesets import code_digest

if TYPE_CHECKING:
    from devloop.upstream.mount import Upstream

TIMEOUT_S = 60.0  # the seed's limit for one test run (tester rule 9)
# A test run waits at most this long for a host-wide CPU slot, then runs without one.
SLOT_WAIT_S = 600.0
REPORT_CAP = 16 * 1024 * 1024
STACK_CAP = 4000
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Frames that only say how the test framework called the test.
_NOISE = re.compile(
    r"^\s*(?:at |❯ ).*(?:node_modules/|\bnode:|processTicksAndRejections|new Promise \(<anon)"
)
# A frame inside the unit's code or tests, in node ("at f (/project/units/u/code/a.js:3:9)")
# or pytest ("code/a.py:3: in f", "code/a.py:3: KeyError") form.
_FRAME = re.compile(
    r"(?:^|[\s(/'\"])((?:code|tests)/[^\s:()'\"]+?\.(?:[cm]?[jt]sx?|vue|py)):(\d+)", re.M
)
PY_FRAME = re.compile(r"^\S+\.py:\d+: ", re.M)
# What `with_source` appends: "source: code/a.js:3: <the line>".
_SOURCE = re.compile(r"^source: (\S+):(\d+): (.*)$", re.M)
_DECISIVE = re.compile(
    r"\b(?:\w*Error|\w*Exception|ERR_\w+|Cannot|cannot|No test|no tests|not found|FAIL|"
    r"failed|Failed|Killed|Segmentation|Interrupted|error)\b"
)


class RunOutcome(BaseModel):
    """One test run: the verdict (also written as result.json) and the raw output."""

    model_config = ConfigDict(frozen=True)

    result: RunResult
    stdout: str
    stderr: str
    exit_code: int = 0
    timed_out: bool = False
    # The tests the run's report and channel agree passed and failed (names as in
    # Failure.test: pytest node ids, `tests/x.test.js::full name` for vitest).
    passed_tests: frozenset[str] = frozenset()
    failed_tests: frozenset[str] = frozenset()


class TestRunner(Protocol):
    """Runs one unit's tests in a sandbox and reports a RunResult."""

    if not TYPE_CHECKING:  # a class attribute, not a protocol member
        __test__ = False  # pytest must not collect it as a test class

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
        """Run the tests of `units/{unit_id}` in `view`; results land in runs/{run_id}.

        `on_output` sees the run's stdout and stderr chunk by chunk while it runs. A
        `derived` build (hollow, mutant) of code that was checked is not checked for
        tampering again, and its coverage is not measured (only its verdict is wanted)."""
        ...

    def hollow_code(self, view: Path, unit_id: str) -> str | None:
        """Replace `units/{unit_id}/code` in `view` (a scratch copy) by its hollow build;
        why it could not (None: done)."""
        ...


@dataclass(frozen=True)
class RunSpec:
    """One run's arguments, and where it reads and writes (host and sandbox)."""

    view: Path
    unit_id: str
    run_id: str
    attempt: int
    retry_budget_left: int
    timeout_s: float = TIMEOUT_S

    def __post_init__(self) -> None:
        for name, value in (("unit_id", self.unit_id), ("run_id", self.run_id)):
            if not _ID.fullmatch(value):
                raise ValueError(f"test runner: {name} {value!r} must match {_ID.pattern}")

    @property
    def unit_rel(self) -> str:
        """The unit dir relative to the view (the sandbox cwd)."""
        return f"units/{self.unit_id}"

    @property
    def run_rel(self) -> str:
        """The run dir relative to the unit dir (how commands name it)."""
        return f"runs/{self.run_id}"

    @property
    def writable(self) -> str:
        """The run dir relative to the view: the only path the run may write."""
        return f"{self.unit_rel}/{self.run_rel}"

    @property
    def unit_dir(self) -> Path:
        """The unit dir on the host."""
        return self.view / self.unit_rel

    @property
    def run_dir(self) -> Path:
        """The run dir on the host."""
        return self.unit_dir / self.run_rel

    def prepare(self) -> Path:
        """Create the run dir (refusing symlinks on the way) and return it."""
        with Dir.open(self.view) as root:
            root.mkdirs(in_view(root, self.writable, "run dir"))
        return self.run_dir

    def run_file(self, name: str) -> str:
        """A file of the run dir, relative to the view."""
        return f"{self.writable}/{name}"

    def relative(self, path: str) -> str:
        """A path the tools printed, made relative to the unit dir when it is inside it."""
        for prefix in (f"{SANDBOX_ROOT}/{self.unit_rel}/", f"{self.unit_dir}/"):
            if path.startswith(prefix):
                return path[len(prefix) :]
        return path


@dataclass
class Parsed:
    """What a report said; `crash_reason` set means the suite did not really run."""

    summary: RunSummary = field(default_factory=RunSummary)
    failures: list[Failure] = field(default_factory=list)
    crash_reason: str | None = None
    # The names of the tests the report file says passed and failed, to check against
    # the channel (the file is the tests' to rewrite: detail, never the verdict).
    passed: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    not_run: NotRun | None = None  # test files the run left out, and why
    # Each test's outcome (devloop.core.models.TestOutcome), by the same names: result.json's
    # `outcomes` and `statuses`.
    outcomes: dict[str, str] = field(default_factory=dict)


SOURCE_CAP = 2_000_000  # bytes of one code/ file the tamper check reads


def code_sources(view: Path, unit_rel: str) -> dict[str, str]:
    """The unit's code/ source files (unit-relative path -> text) the tamper check reads;
    links, fifos and what the walk refuses are left out (they are violations elsewhere)."""
    return unit_sources(view, unit_rel, "code", tamper.PY_SUFFIXES + tamper.NODE_SUFFIXES)


def unit_sources(
    view: Path, unit_rel: str, top: str, suffixes: tuple[str, ...] | None = None
) -> dict[str, str]:
    """The files under the unit's `top` (code, tests) with one of the suffixes (any when
    None), unit-relative path -> text, each read up to SOURCE_CAP through the view's handle."""
    out: dict[str, str] = {}
    try:
        with Dir.open(view) as root:
            if not root.is_dir(f"{unit_rel}/{top}"):
                return out
            for e in walk(root, f"{unit_rel}/{top}"):
                if e.kind != "file" or e.problem is not None:
                    continue
                if suffixes is None or e.rel.endswith(suffixes):
                    raw = root.read_bytes(f"{unit_rel}/{top}/{e.rel}", SOURCE_CAP)
                    out[f"{top}/{e.rel}"] = raw.decode("utf-8", "replace")
    except (TooMany, OSError):
        pass  # what was read is what counts; the rest is no code set anyone commits
    return out


def refuse_tampering(spec: RunSpec) -> RunOutcome | None:
    """A run whose code/ reaches into the test framework is not run: a crash for the coder,
    naming each place and its fix. None when the code passes the check."""
    found = tamper.findings(code_sources(spec.view, spec.unit_rel))
    if not found:
        return None
    obs = Observation(exit_code=2, stdout="", stderr="", duration_ms=0, refused="tamper check")
    return finish(spec, Parsed(), obs, "the tamper check", tamper.crash_reason(found))


# A run refused because tests/ import of other units what is not there: the tester's.
TESTS_UPSTREAM = "the tests import what the unit's dependencies do not provide"


def refuse_imports(spec: RunSpec, upstream: Upstream | None) -> RunOutcome | None:
    """A run whose code/ or tests/ import of another unit what is not there (a unit that
    is no dependency or has not passed, a module or name its contract does not export)
    is not run: a crash naming each import and its fix, for the coder (code/) or the
    tester (tests/). None when every import holds."""
    if upstream is None:
        return None
    sources = {**code_sources(spec.view, spec.unit_rel),
               **unit_sources(spec.view, spec.unit_rel, "tests")}
    found = upstream.problems(sources)
    if not found:
        return None
    in_code = [p for p in found if p.startswith("code/")]
    head = tamper.UPSTREAM if in_code else TESTS_UPSTREAM
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    obs = Observation(exit_code=2, stdout="", stderr="", duration_ms=0, refused="import check")
    reason = f"{head}: " + " | ".join((in_code or found)[:3]) + more
    return finish(spec, Parsed(), obs, "the import check", reason)


def tampered(records: list[dict[str, Any]]) -> str | None:
    """The crash reason when the plugin or the reporter saw the framework change."""
    whats = [str(r.get("what", "?"))[:300] for r in records if r.get("e") == "tamper"]
    return f"{tamper.TAMPERED}: " + "; ".join(whats[:5]) if whats else None


def finish(
    spec: RunSpec,
    parsed: Parsed,
    obs: Observation,
    tool: str,
    code_fault: str | None = None,
    coverage: CodeCoverage | None = None,
    stream: Records | None = None,
) -> RunOutcome:
    """Turn a parsed report and the observation into the verdict, and write the run files.

    `code_fault` (the code tampered with the framework) overrides everything: the run
    proves nothing, and it is the coder's to fix. `coverage` is recorded beside the
    verdict, never part of it (dropped for a run that did not really run). `stream`, the
    channel's records, names the test a killed run was in."""
    reason, starved = parsed.crash_reason, None
    if code_fault:
        reason = code_fault
    elif obs.timed_out:
        running = timing.running_test(stream or Records(), obs.stderr, spec.relative)
        last = last_output(obs, running)
        reason, was_starved = timing.killed_reason(obs, tool, spec.timeout_s, last, running)
        if was_starved:
            starved, reason = reason, None
    elif reason is None and parsed.summary.total == 0:
        found = decisive_lines(obs.stderr + "\n" + obs.stdout)
        reason = f"{tool} ran no tests" + (f": {found}" if found else "")
    elif reason is None:
        starved = timing.starved_timeouts(obs, parsed.failures)
    # The start and end lines vitest's workers write (for the running test's name) are
    # the runner's, not the tests' output: stderr.txt and the tail hold the rest.
    obs = obs.model_copy(update={"stderr": timing.unmarked(obs.stderr)})
    green = reason is None and not starved and parsed.summary.failed == 0
    if green and parsed.summary.total > 0 and obs.exit_code != 0:
        # Whatever the reports say, a runner that exited non-zero never passes a unit.
        reason = f"{DISAGREE}: the tests passed, yet {tool} exited with status {obs.exit_code}"
    crashed = reason is not None
    ok = not crashed and not starved and parsed.summary.failed == 0 and parsed.summary.total > 0
    result = RunResult(
        run_id=spec.run_id,
        unit_id=spec.unit_id,
        attempt=spec.attempt,
        ok=ok,
        crashed=crashed,
        crash_reason=reason,
        summary=parsed.summary,
        failures=[] if crashed or starved else _excused(parsed.failures, obs),
        next_action=_next_action(ok, crashed or starved is not None, reason, parsed.failures),
        retry_budget_left=spec.retry_budget_left,
        duration_ms=obs.duration_ms,
        stdout_tail=output_tail(obs) if crashed or starved else None,
        not_run=parsed.not_run,
        wall_s=round(obs.duration_ms / 1000, 3),
        cpu_s=obs.cpu_s,
        wait_s=obs.wait_s,
        starved=starved is not None,
        starved_reason=starved,
        code_digest=code_digest(spec.view, spec.unit_rel),
        coverage=None if crashed or starved else coverage,
        statuses=None if crashed or starved else RunStatuses.of(parsed.outcomes),
        outcomes=None if crashed or starved else _outcomes(parsed.outcomes),
    )
    write_run_file(spec.view, spec.run_file("stdout.txt"), obs.stdout)
    write_run_file(spec.view, spec.run_file("stderr.txt"), obs.stderr)
    text = json.dumps(result.to_json_dict(), indent=2, ensure_ascii=False)
    write_run_file(spec.view, spec.run_file("result.json"), text + "\n")
    return RunOutcome(
        result=result,
        stdout=obs.stdout,
        stderr=obs.stderr,
        exit_code=obs.exit_code,
        timed_out=obs.timed_out,
        passed_tests=frozenset(parsed.passed) if not crashed else frozenset(),
        failed_tests=frozenset(parsed.failed) if not crashed else frozenset(),
    )


def _next_action(
    ok: bool, stopped: bool, reason: str | None, failures: list[Failure]
) -> NextAction:
    """Who acts next: nobody on green; the coder on red tests and on code that tampered;
    the tester on a run that did not really run, and on red tests when the tests' own
    set-up failed (Failure.fault), since no change to the code can mend that."""
    if ok:
        return "none"
    if tamper.is_code_fault(reason):
        return "retry_coder"
    if stopped or any(f.fault == "tests" for f in failures):
        return "retry_tester"
    return "retry_coder"


def _outcomes(found: dict[str, str]) -> dict[str, TestOutcome]:
    """The per-test outcomes as result.json's type (an unknown one is a skip)."""
    return {n: cast(TestOutcome, o if o in SEED_COUNT else "skipped") for n, o in found.items()}


def _excused(failures: list[Failure], obs: Observation) -> list[Failure]:
    """Timeouts of a red run that waited for a CPU say so: the code may not be slow."""
    share = timing.wait_share(obs)
    if share < timing.STARVED_SHARE / 2:
        return failures
    note = (
        f" Note: this run spent {share:.0%} of its time waiting for a CPU (a busy machine), "
        "so this timeout may not be the code's fault."
    )
    return [
        f.model_copy(update={"hint": f.hint + note}) if timing.is_timeout(f) else f
        for f in failures
    ]


def cache_dir_of(toolchain: Path) -> Path:
    """The cache dir a toolchain was installed into (`<cache>/toolchains/<name>/...`)."""
    for parent in toolchain.parents:
        if parent.name == "toolchains":
            return parent.parent
    return cache_root(load_settings())


def read_report(view: Path, rel: str, cap: int = REPORT_CAP) -> str | None:
    """A report the sandbox wrote at view/rel, or None; never through a link the tests
    planted, never from a fifo or device, never more than cap bytes."""
    try:
        with Dir.open(view) as root:
            return root.read_text(rel, cap)
    except OSError:
        return None


def write_run_file(view: Path, rel: str, text: str) -> None:
    """Write view/rel, replacing whatever the sandbox left there (link, fifo, dir)."""
    with Dir.open(view) as root:
        root.write_atomic(rel, text, 0o644, replace=True)


def clean_stack(text: str, cap: int = STACK_CAP) -> str:
    """A failure message without framework frames, capped (head and tail kept)."""
    lines = [ln.rstrip() for ln in text.splitlines() if not _NOISE.match(ln)]
    out = "\n".join(lines).strip()
    if len(out) > cap:
        out = out[: cap // 4] + "\n[...]\n" + out[-(cap - cap // 4) :]
    return out


def decisive_lines(text: str, limit: int = 4) -> str:
    """The lines that name an error (errors first), joined with " | " (empty when none)."""
    found: list[str] = []
    for line in text.splitlines():
        line = line.strip()[:300]
        if line and not _NOISE.match(line) and _DECISIVE.search(line) and line not in found:
            found.append(line)
    found.sort(key=lambda ln: not re.search(r"Error|ERROR|Exception", ln))  # stable
    return " | ".join(found[:limit])


def last_output(obs: Observation, running: timing.Running | None) -> str:
    """The error lines (else the last lines) a killed run wrote, only since the running test
    started when that is known: never what earlier, finished tests printed."""
    stdout, stderr = obs.stdout, obs.stderr
    if running is not None:
        stdout = timing.own_output(timing.since(stdout, running.stdout_at), running)
        stderr = timing.own_output(timing.since(stderr, running.stderr_at), running)
    tail = [ln.strip() for ln in stdout.splitlines() if ln.strip()][-3:]
    return decisive_lines(stderr) or " | ".join(tail)


def output_tail(obs: Observation, chars: int = 2000) -> str:
    """The end of stdout and stderr, for a crashed run's result.json."""
    parts = []
    for name, text in (("stdout", obs.stdout), ("stderr", obs.stderr)):
        text = text.strip()
        if text:
            parts.append(f"--- {name} ---\n{text[-chars:]}")
    return "\n".join(parts)


@dataclass(frozen=True)
class Frame:
    """A place in the unit: path relative to the unit dir, line, and its source if known."""

    path: str
    line: int
    source: str | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" + (f" (`{self.source}`)" if self.source else "")


def code_frame(stack: str) -> Frame | None:
    """The frame inside code/ nearest the error (node: first; pytest tracebacks: last)."""
    frames = [m for m in _FRAME.finditer(stack) if m.group(1).startswith("code/")]
    return _frame(stack, frames[-1] if PY_FRAME.search(stack) else frames[0]) if frames else None


def frame_in_tests(stack: str) -> Frame | None:
    """The first frame inside tests/ (where the test called into the code)."""
    found = next((m for m in _FRAME.finditer(stack) if m.group(1).startswith("tests/")), None)
    return _frame(stack, found) if found else None


def _frame(stack: str, match: re.Match[str]) -> Frame:
    """A Frame for a _FRAME match, with the source line `with_source` appended, if any."""
    path, line = match.group(1), int(match.group(2))
    sources = {(m.group(1), int(m.group(2))): m.group(3).strip() for m in _SOURCE.finditer(stack)}
    return Frame(path, line, sources.get((path, line)))


def with_source(stack: str, unit_dir: Path) -> str:
    """Append the source lines of the first code/ and tests/ frames (hints quote them)."""
    extra = []
    for frame in (code_frame(stack), frame_in_tests(stack)):
        if frame is None:
            continue
        text = _source_line(unit_dir, frame.path, frame.line)
        if text and f"source: {frame.path}:{frame.line}:" not in stack:
            extra.append(f"source: {frame.path}:{frame.line}: {text}")
    return "\n".join([stack, *extra]) if extra else stack


def _source_line(unit_dir: Path, rel: str, line: int) -> str | None:
    """One stripped line of a regular file inside the unit (no `..`, no symlinks), or None."""
    try:
        with Dir.open(unit_dir) as unit:
            lines = unit.read_text(rel, cap=2_000_000).splitlines()
    except OSError:
        return None
    return lines[line - 1].strip()[:200] if 0 < line <= len(lines) else None
