"""The coder's own test runs (Lev's workflow): BASELINE before the first edit, VERIFY after.

A coder retry runs the tester's existing tests against its current code with the stack's
runner, in its sandbox, read-only for the record: the run dir is scratch under `runs/`
(`verify-<attempt>-<n>`, outside the coder's write set), removed through the view's
handle as soon as the runner is done, so nothing of it is committed, no bug is opened and
the tester's independent run stays the verdict. The runner still takes its account from
its channel; the coder only reads what it said.

DONE WHEN: the failing tests pass and nothing that passed in the baseline fails. Test
names are known only for failing tests, so "passed in the baseline" is "not failing in
the baseline, which ran"; tests/ is read-only to the coder, so no test can appear.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from devloop.agent.stuck import TestTally
from devloop.agent.tools import ToolContext
from devloop.core.models import RunResult
from devloop.roles.services import RoleServices
from devloop.runners.base import TIMEOUT_S
from devloop.safe.safetree import Limits, TooMany, remove_tree, walk

PREFIX = "verify"


def has_tests(ctx: ToolContext) -> bool:
    """Whether the unit has any test file for the coder to run."""
    tests = f"{ctx.unit_rel}/tests"
    try:
        if not ctx.files.is_dir(tests):
            return False
        return any(e.kind == "file" for e in walk(ctx.files, tests, Limits()))
    except (TooMany, OSError):
        return False


def run_existing_tests(ctx: ToolContext) -> RunResult | None:
    """Run tests/ against code/ now; None when there is no runner or no test."""
    role: RoleServices = ctx.services["role"]
    if role.runner is None or not has_tests(ctx):
        return None
    role.verify_runs += 1
    run_id = f"{PREFIX}-{role.attempt}-{role.verify_runs}"
    try:
        outcome = role.runner.run(
            view=ctx.view,
            unit_id=role.unit_id,
            run_id=run_id,
            attempt=role.attempt,
            retry_budget_left=role.retry_budget_left,
            timeout_s=TIMEOUT_S,
        )
    finally:
        # Whatever the tests left there (links, fifos, deep trees) goes with it.
        remove_tree(ctx.files, f"{ctx.unit_rel}/runs/{run_id}")
    role.last_verify = {"result": outcome.result.to_json_dict(), "fingerprint": code_digest(ctx)}
    return outcome.result


def code_digest(ctx: ToolContext) -> str:
    """What a run of the tests depends on that the coder can change: code/ (names, sizes,
    mtimes). coder.log or contract.json changing does not make a verify run stale."""
    h = hashlib.sha256()
    code = f"{ctx.unit_rel}/code"
    try:
        if ctx.files.is_dir(code):
            for e in walk(ctx.files, code, Limits()):
                h.update(f"{e.rel}\0{e.kind}\0{e.size}\0{e.mtime_ns}\0{e.problem}\n".encode())
    except (TooMany, OSError):
        h.update(b"unreadable")
    return h.hexdigest()


def tally(result: RunResult) -> TestTally:
    """What stuck detection and the best state read of a run."""
    crashed = result.crash_reason if result.crashed else None
    if result.starved:
        crashed = f"the machine was too busy to judge the run: {result.starved_reason}"
    return TestTally(
        total=result.summary.total,
        passed=result.summary.passed,
        failed=tuple(f.test for f in result.failures),
        crashed=crashed,
    )


@dataclass(frozen=True)
class Comparison:
    """A run against the baseline."""

    fixed: list[str]
    still_failing: list[str]
    regressed: list[str]  # passed in the baseline (it ran), fail now
    crashed: str | None  # the run did not run (and the baseline had passing tests)

    @property
    def done(self) -> bool:
        """DONE WHEN: nothing that failed still fails, and nothing regressed."""
        return not (self.still_failing or self.regressed or self.crashed)


def compare(baseline: RunResult | None, now: RunResult) -> Comparison:
    """What changed since the baseline (no baseline: every failure is still failing)."""
    failing = {f.test for f in now.failures}
    before = {f.test for f in baseline.failures} if baseline else set()
    ran = baseline is not None and not baseline.crashed and not baseline.starved
    crashed = None
    if now.crashed and baseline is not None and baseline.summary.passed > 0:
        crashed = now.crash_reason or "the tests did not run"
    return Comparison(
        fixed=sorted(before - failing) if not now.crashed else [],
        still_failing=sorted(failing & before) if ran else sorted(failing),
        regressed=sorted(failing - before) if ran else [],
        crashed=crashed,
    )


def report(baseline: RunResult | None, now: RunResult) -> dict[str, Any]:
    """The verify_tests answer: counts, the comparison and each failure's hint."""
    c = compare(baseline, now)
    out: dict[str, Any] = {
        "passed": now.summary.passed,
        "total": now.summary.total,
        "baseline": (
            f"{baseline.summary.passed}/{baseline.summary.total} passed" if baseline else "none"
        ),
        "fixed_since_baseline": c.fixed,
        "still_failing": c.still_failing,
        "regressed": c.regressed,
        "done_when_met": c.done,
        "failures": [
            {"test": f.test, "expected": f.expected, "got": f.got, "hint": f.hint}
            for f in now.failures
        ],
    }
    out["crashed"] = (now.crash_reason or "the tests did not run") if now.crashed else None
    out["starved"] = now.starved_reason if now.starved else None
    return out


def baseline_path(unit_id: str) -> str:
    """agent-state/ file holding the baseline run of the coder's current attempt."""
    return f"coder-{unit_id}-baseline.json"


def load_baseline(saved: bytes | None, attempt: int) -> RunResult | None:
    """The baseline saved for this attempt (a resumed session keeps its first one)."""
    if not saved:
        return None
    data = json.loads(saved)
    if data.get("attempt") != attempt or not data.get("result"):
        return None
    return RunResult.model_validate(data["result"])


def dump_baseline(result: RunResult, attempt: int) -> bytes:
    """The agent-state/ record of a baseline run."""
    return json.dumps({"attempt": attempt, "result": result.to_json_dict()}).encode()


# The three lines a retry's todolist states (Lev's workflow), as item titles.
WORKFLOW = ("BASELINE:", "VERIFY:", "DONE WHEN:")
WORKFLOW_TEMPLATE = (
    "BASELINE: <what the runtime's baseline run showed: N/M passed, the failing tests>; "
    "VERIFY: verify_tests after each change; "
    "DONE WHEN: the failing tests pass and nothing that passed in the baseline fails"
)


def missing_workflow(titles: list[str]) -> list[str]:
    """Which of the three workflow lines no todolist item states."""
    heads = [t.strip().upper() for t in titles]
    return [line for line in WORKFLOW if not any(h.startswith(line) for h in heads)]


def needs_workflow(role: RoleServices) -> bool:
    """A coder retry with a baseline states BASELINE, VERIFY and DONE WHEN in its plan."""
    return role.role == "coder" and role.mode == "retry" and role.baseline is not None
