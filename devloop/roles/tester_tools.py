"""The tester's own tools: run the tests, build hints, and work the bug ledger."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from devloop.agent.tools import ProgressEvent, Tool, ToolContext, ToolResult
from devloop.core.models import RunResult
from devloop.ledgers import BugNotOwned, BugTransitionError
from devloop.roles.checks import code_names
from devloop.roles.state_tools import services
from devloop.roles.testrun import run_and_record, write_result
from devloop.roles.verify import tally
from devloop.runners.hints import build_hint, is_useful_hint
from devloop.runners.tamper import is_code_fault
from devloop.runners.timing import load_note


class RunTestsInput(BaseModel):
    timeout_s: float = Field(
        default=60,
        gt=0,
        le=60,
        description=(
            "Seconds of time the machine gives the run (CPU or running time, whichever "
            "runs out first); on a busy machine the run is stopped at three times this "
            "much wall time at the latest."
        ),
    )


# What the tester is told of a crash the code caused: it goes to the coder as it is.
CODE_CRASH = (
    "the code's: the coder gets this crash with its code frame. Do not rewrite the tests "
    "around it or stub the code under test; say what you found in your summary and finish."
)


class RunTestsTool(Tool):
    """Run the unit's tests with the stack's runner and record result.json and bugs."""

    name = "run_tests"
    description = (
        "Run every test under tests/ against code/ (vitest or pytest, by stack), write "
        "runs/<run id>/result.json, stdout.txt and stderr.txt, and bridge failures to the "
        "bug ledger. Returns the summary, each failure with its hint, or why the run crashed. "
        "A run is killed once it used timeout_s seconds of CPU or of the time the machine "
        "gave it, and after 3 x timeout_s of wall time at the latest (it may first queue "
        "up to 10 minutes for a free test slot). A run killed while it kept the CPU busy is "
        "an endless loop, never `starved`; its crash reason names the test that was "
        "running. When pytest's stack dump puts the loop in code/ the reason starts 'a test "
        "never finished because the code under test did not return' and it goes to the "
        "coder; a loop in tests/, or with no frame (vitest), is yours: fix the test, or, "
        "when the code loops, make the test fail fast and give the coder a hint. `starved` "
        "means the machine gave the run too little CPU: it is repeated later."
    )
    Input = RunTestsInput

    def run(self, ctx: ToolContext, args: RunTestsInput) -> ToolResult:
        role = services(ctx)
        if role.runner is None or role.run_id is None:
            return ToolResult("run_tests is not available in this session", is_error=True)
        result = run_and_record(role, ctx.view, args.timeout_s)
        assert role.last_run is not None
        opened = role.last_run["bugs_opened"]
        report: dict[str, Any] = {
            "ok": result.ok,
            "crashed": result.crashed,
            "summary": result.summary.to_json_dict(),
            "failures": [f.to_json_dict() for f in result.failures],
            "bugs_opened": opened,
            "result_ref": f"runs/{role.run_id}/result.json",
        }
        if result.crashed:
            report["crash_reason"] = result.crash_reason
            if is_code_fault(result.crash_reason):
                report["whose"] = CODE_CRASH
        if result.not_run:  # test files the run left out: the tester must know
            report["not_run"] = result.not_run.to_json_dict()
        if result.starved:
            report["starved"] = True
            report["starved_reason"] = result.starved_reason
        ctx.emit(ProgressEvent("tests", note=load_note(result)))
        return ToolResult(
            json.dumps(report, ensure_ascii=False, indent=1),
            data=report,
            untrusted=True,
            changed_files=(f"runs/{role.run_id}/result.json",),
            tests=tally(result),  # stuck detection: red with the same failures N times
        )


class HintInput(BaseModel):
    test: str
    expected: Any = None
    got: Any = None
    stack: str = ""


class HintBuilderTool(Tool):
    """Draft a hint for one failure (review it and improve it if it says too little)."""

    name = "hint_builder"
    description = (
        "Draft a one- or two-sentence hint for the coder from a failure's test name, "
        "expected, got and stack. Review the draft: a hint says what to change and where."
    )
    Input = HintInput

    def run(self, ctx: ToolContext, args: HintInput) -> ToolResult:
        return ToolResult(build_hint(args.test, args.expected, args.got, args.stack))


class SetHintInput(BaseModel):
    test: str = Field(description="The failing test, as run_tests names it.")
    hint: str = Field(description="What to change and where, in the code's own terms.")


class SetHintTool(Tool):
    """Give one failure of the last run its hint (result.json is the runner's to write)."""

    name = "set_hint"
    description = (
        "Replace the hint of one failure of your last run_tests with your own: one or two "
        "sentences naming the code (file, function or route) or the value that must "
        "change and what to do. result.json is rewritten by the runtime; a hint that names "
        "nothing is refused."
    )
    Input = SetHintInput

    def run(self, ctx: ToolContext, args: SetHintInput) -> ToolResult:
        role = services(ctx)
        if role.last_run is None or role.run_id is None:
            return ToolResult("no test run yet in this session: call run_tests", is_error=True)
        result = RunResult.model_validate(role.last_run["result"])
        found = [f for f in result.failures if f.test == args.test]
        if not found:
            names = ", ".join(f.test for f in result.failures[:5]) or "none"
            return ToolResult(f"no failure {args.test!r} in the last run (failures: {names})", True)
        # Tests may share a name (vitest allows it): the hint goes on each failure of it.
        known = code_names(ctx)
        if not all(is_useful_hint(args.hint, f.test, f.expected, f.got, known) for f in found):
            return ToolResult(
                "refused: the hint must name the code (a file, function or route) or the value "
                "that must change, and say what to do; not generic words, not only expected "
                "and got, not the test's name",
                is_error=True,
            )
        for failure in found:
            failure.hint = args.hint
        write_result(role, ctx.view, result)
        role.last_run = {**role.last_run, "result": result.to_json_dict()}
        return ToolResult(
            f"hint of {args.test!r} set",
            data={"test": args.test},
            changed_files=(f"runs/{role.run_id}/result.json",),
        )


class BugOpenInput(BaseModel):
    test_name: str
    title: str
    detail: str = ""
    severity: Literal["low", "medium", "high", "critical"] = "medium"
    category: str = "unknown"


class BugOpenTool(Tool):
    """Open a bug for a failing test (an open bug for the same test is reused)."""

    name = "bug_open"
    description = (
        "Open a bug in bugs.ndjson for a failing test of this unit. A live bug for the same "
        "test is reused, not duplicated. run_tests already does this for its failures."
    )
    Input = BugOpenInput

    def run(self, ctx: ToolContext, args: BugOpenInput) -> ToolResult:
        role = services(ctx)
        bug, new = role.bugs.open(
            role.unit_id,
            role.run_id or "manual",
            args.test_name,
            severity=args.severity,
            category=args.category,
            title=args.title,
            detail=args.detail,
        )
        _bridge_failure(ctx, args.test_name, bug.id)
        return ToolResult(json.dumps({"id": bug.id, "new": new, "status": bug.status}))


def _bridge_failure(ctx: ToolContext, test: str, bug_id: str) -> None:
    """Name the bug on the last run's failure of that test when it has none yet."""
    role = services(ctx)
    if role.last_run is None or role.run_id is None:
        return
    result = RunResult.model_validate(role.last_run["result"])
    unbridged = [f for f in result.failures if f.test == test and not f.bug_id]
    if unbridged:
        unbridged[0].bug_id = bug_id
        write_result(role, ctx.view, result)
        role.last_run = {**role.last_run, "result": result.to_json_dict()}


class BugTransitionInput(BaseModel):
    bug_id: str
    to: Literal["open", "fixing", "fixed"]
    fix_refs: list[str] = Field(default_factory=list)


class BugTransitionTool(Tool):
    """Move a bug along open -> fixing -> fixed (or reopen it)."""

    name = "bug_transition"
    description = "Move a bug to open, fixing or fixed; give the run id that proves a fix."
    Input = BugTransitionInput

    def run(self, ctx: ToolContext, args: BugTransitionInput) -> ToolResult:
        role = services(ctx)
        try:
            bug = role.bugs.transition(
                args.bug_id, args.to, by=role.role, fix_refs=args.fix_refs, owner=role.unit_id
            )
        except (BugNotOwned, BugTransitionError) as exc:
            return ToolResult(str(exc), is_error=True)
        return ToolResult(json.dumps({"id": bug.id, "status": bug.status}))


class BugListInput(BaseModel):
    status: list[Literal["open", "fixing", "fixed"]] | None = None


class BugListTool(Tool):
    """List this unit's bugs, optionally by status."""

    name = "bug_list"
    description = "List this unit's bugs (id, status, test, title), optionally filtered by status."
    Input = BugListInput

    def run(self, ctx: ToolContext, args: BugListInput) -> ToolResult:
        role = services(ctx)
        bugs = role.bugs.list(unit_id=role.unit_id, status=args.status)
        rows = [
            {"id": b.id, "status": b.status, "test": b.test_name, "title": b.title} for b in bugs
        ]
        return ToolResult(json.dumps(rows, ensure_ascii=False), data={"bugs": rows})
