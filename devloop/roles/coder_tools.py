"""The coder's own tools: contract hashing and bridging, sandbox check, coder.log, and its
read-only run of the existing tests (verify_tests)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from devloop.agent.fs_tools import _check_writable
from devloop.agent.tools import Tool, ToolContext, ToolResult
from devloop.core.contracts import ContractMissingExports, contract_bridge, hash_contract
from devloop.core.models import CoderDecision
from devloop.core.vagueness import is_specific
from devloop.ledgers import (
    DecisionInvalid,
    DirSink,
    format_decision,
    validate_decision,
)
from devloop.ledgers.sink import iso_z, utc_now
from devloop.roles import derive, verify
from devloop.roles.state_tools import services
from devloop.safe.owned import OwnedFile


class HashContractInput(BaseModel):
    contract: dict[str, Any] = Field(description="The contract object; its `exports` is hashed.")
    write: bool = Field(
        default=False,
        description="Also write contract.json: the contract with `version` set to the hash "
        "(and `unit_id` when missing), then check it as contract_bridge does.",
    )


class HashContractTool(Tool):
    """Compute a contract's version hash, and (write=true) write contract.json with it."""

    name = "hash_contract"
    description = (
        "Compute the version of a contract: sha256 of its canonical `exports`; never compute "
        "it by hand. With write=true it also writes contract.json with that `version` and "
        "answers contract_bridge's verdict, all in one call."
    )
    Input = HashContractInput

    def run(self, ctx: ToolContext, args: HashContractInput) -> ToolResult:
        try:
            version = hash_contract(args.contract)
        except ContractMissingExports:
            return ToolResult("the contract has no `exports` object", is_error=True)
        if not args.write:
            return ToolResult(version)
        return _write_contract(ctx, {**args.contract, "version": version})


def _write_contract(ctx: ToolContext, contract: dict[str, Any]) -> ToolResult:
    """Write contract.json (the unit's own id unless given) and bridge it."""
    role = services(ctx)
    contract = {"unit_id": role.unit_id, **contract}
    checked = _check_writable(ctx, "contract.json")
    if isinstance(checked, ToolResult):
        return checked
    text = json.dumps(contract, indent=2, ensure_ascii=False) + "\n"
    try:
        ctx.files.write_atomic(checked[0], text)
    except OSError as exc:
        return ToolResult(f"contract.json: {getattr(exc, 'reason', exc)}", is_error=True)
    bridge = contract_bridge(role.units, role.unit_id, contract)
    payload = {"written": "contract.json", "version": contract["version"],
               "bridge": bridge.model_dump(exclude_none=True)}
    return ToolResult(json.dumps(payload), data=payload, changed_files=("contract.json",))


CONTRACT_CAP = 1024 * 1024


class NoInput(BaseModel):
    pass


def read_contract(ctx: ToolContext) -> dict[str, Any] | None:
    """The unit's contract.json in the view, or None when absent or unreadable."""
    try:
        data = json.loads(ctx.files.read_text(f"{ctx.unit_rel}/contract.json", cap=CONTRACT_CAP))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class ContractBridgeTool(Tool):
    """Compare contract.json with itself and with the SDD-declared hash in units.json."""

    name = "contract_bridge"
    description = (
        "Check your contract.json: its version must equal hash_contract(contract) and the "
        "hash units.json declares for this unit. Returns ok, expected, actual, reason, hint."
    )
    Input = NoInput

    def run(self, ctx: ToolContext, args: NoInput) -> ToolResult:
        role = services(ctx)
        result = contract_bridge(role.units, role.unit_id, read_contract(ctx))
        return ToolResult(result.model_dump_json(exclude_none=True), data=result.model_dump())


class SandboxCheckTool(Tool):
    """List every change made outside the role's write set."""

    name = "sandbox_check"
    description = "List files you changed outside what you may write. ok means none."
    Input = NoInput

    def run(self, ctx: ToolContext, args: NoInput) -> ToolResult:
        violations = services(ctx).violations()
        payload = {"ok": not violations, "violations": violations}
        return ToolResult(json.dumps(payload), data=payload)


class Decision(BaseModel):
    attempt: int | None = Field(default=None, description="Defaults to this session's attempt.")
    last_failure: str | None = Field(default=None, description="Retry: what failed last time.")
    last_cause: str | None = Field(default=None, description="Retry: why it really failed.")
    this_fix: str = Field(description="What you changed this time.")
    rationale: str = Field(description="Why this fix is right.")
    changed_files: list[str] | None = Field(
        default=None,
        description="Unit-relative paths, e.g. code/server.js; by default what this attempt "
        "changed under code/ and contract.json, as the runtime saw it.",
    )


class AppendCoderLogInput(BaseModel):
    decision: Decision


TEMPLATE = """\
last_failure: <the failing test, by name>: expected <X>, got <Y>
last_cause: <why, naming the code: file, function, field or call>
this_fix: <what you changed, and where>
rationale: <why this fix is right>
changed_files: [code/...]"""


def names_a_test(text: str, tests: list[str]) -> bool:
    """Whether text names one of the tests: its whole name, its last part (`test_x`, the
    it() title), or most of that title's words."""
    low = text.lower()
    for test in tests:
        last = test.replace(" > ", "::").split("::")[-1].strip().lower()
        if test.lower() in low or (last and last in low):
            return True
        words = {w for w in last.replace("_", " ").split() if len(w) > 2 and w != "test"}
        if words and len([w for w in words if w in low]) >= max(2, (2 * len(words) + 2) // 3):
            return True
    return False


def reflection_problems(decision: Decision, failing: list[str]) -> list[str]:
    """Why a retry's reflection says nothing: "fixed the bug" names no test and no cause."""
    problems = []
    said = " ".join(filter(None, (decision.last_failure, decision.last_cause)))
    if not (failing and names_a_test(said, failing)) and not is_specific(decision.last_cause):
        which = f" (one of: {', '.join(failing[:3])})" if failing else ""
        problems.append(
            f"the reflection names neither the failing test{which} nor a concrete cause"
        )
    if not is_specific(decision.this_fix):
        problems.append("this_fix does not say what changed where")
    return problems


class AppendCoderLogTool(Tool):
    """Append a structured decision block to coder.log."""

    name = "append_coder_log"
    description = (
        "Append your decision to coder.log. Every attempt needs this_fix and rationale; a "
        "retry also needs last_failure and last_cause, written as: last time X failed, "
        "because Y; this time Z. attempt, ts and changed_files are facts the runtime fills "
        "in when you leave them out."
    )
    Input = AppendCoderLogInput

    def run(self, ctx: ToolContext, args: AppendCoderLogInput) -> ToolResult:
        role = services(ctx)
        decision = args.decision.model_dump(exclude_none=True)
        decision.setdefault("attempt", role.attempt)
        if "changed_files" not in decision:
            decision["changed_files"] = derive.written_files(role)
            if not decision["changed_files"]:
                return ToolResult(
                    "changed_files: nothing under code/ or contract.json changed in this "
                    "attempt yet; write the code first, or name the files you mean",
                    is_error=True,
                )
        # An attempt started from implement again (a scripted pass built by a real model)
        # has no failure behind it to reflect on.
        retry = decision["attempt"] > 1 and role.mode != "implement"
        if retry:
            vague = reflection_problems(args.decision, role.failing_tests)
            if vague:
                return ToolResult(
                    "refused: " + "; ".join(vague) + ". Follow this template:\n" + TEMPLATE,
                    is_error=True,
                )
        try:
            written, note = write_decision(ctx, validate_decision(decision, retry=retry))
        except DecisionInvalid as exc:
            return ToolResult(str(exc), is_error=True)
        except OSError as exc:  # coder.log is a link, a fifo ...: the host does not follow it
            return ToolResult(f"coder.log: {getattr(exc, 'reason', exc)}", is_error=True)
        return ToolResult(
            f"coder.log: decision for attempt {written.attempt} appended{note}",
            changed_files=("coder.log",),
        )


# What a coder.log entry the runtime wrote says of the narrative the coder never gave.
NOT_GIVEN = "(not given: the coder logged no decision for this attempt)"


def log_facts(ctx: ToolContext) -> CoderDecision | None:
    """The coder logged no decision for this attempt: append the entry's facts (attempt,
    ts, changed_files and, in a retry, the tests that failed) with its narrative marked
    not given, so coder.log keeps one entry per attempt. None: there is one already."""
    role = services(ctx)
    if any(d.attempt == role.attempt for d in derive.logged(ctx)):
        return None
    data: dict[str, Any] = {"attempt": role.attempt}
    if role.attempt > 1 and role.mode != "implement":
        failing = role.failing_tests
        more = f" and {len(failing) - 3} more" if len(failing) > 3 else ""
        data["last_failure"] = ", ".join(failing[:3]) + more if failing else NOT_GIVEN
        data["last_cause"] = NOT_GIVEN
    data.update(this_fix=NOT_GIVEN, rationale=NOT_GIVEN,
                changed_files=derive.written_files(role))
    # Built directly, not validated as a model's decision would be: an attempt that
    # changed nothing states changed_files: [] as the fact it is.
    decision = CoderDecision.model_validate({**data, "ts": iso_z(utc_now())})
    written, _ = write_decision(ctx, decision)
    return written


def write_decision(ctx: ToolContext, model: CoderDecision) -> tuple[CoderDecision, str]:
    """Append one block to coder.log, the one way it is written (append_coder_log and the
    runtime's entry of facts); the block and a note when the view's log had been changed."""
    record = ctx.owned_files.get("coder.log")
    path = f"{ctx.unit_rel}/coder.log"
    if record is None:  # a context without a workspace: a plain append, the block whole
        DirSink(ctx.files, path).append(format_decision(model))
        return model, ""
    note = _restored_note(ctx, record, path)
    return _append_owned(ctx, record, path, model), note


def _append_owned(
    ctx: ToolContext, record: OwnedFile, path: str, model: CoderDecision
) -> CoderDecision:
    """Append the block to the log as this tool last wrote it (never to what the view
    holds, which the session may have changed), write that, and record it."""
    base = record.data or b""
    if base and not base.endswith(b"\n"):
        base += b"\n"  # a torn last line must not swallow this block
    data = base + format_decision(model).encode("utf-8")
    ctx.files.write_atomic(path, data)  # refused when coder.log is a link or a fifo
    ctx.owned_files.wrote("coder.log", data)
    return model


def _restored_note(ctx: ToolContext, record: OwnedFile, path: str) -> str:
    """What to tell the model when coder.log was changed by other means since."""
    try:
        now = ctx.files.read_bytes(path) if ctx.files.is_file(path) else None
    except OSError:
        now = None
    if (now or b"") == (record.data or b""):
        return ""  # as recorded (an absent log and an empty placeholder are the same)
    return (
        "; coder.log had been changed by other means: that change was discarded and the "
        "log is as append_coder_log wrote it, with this block added"
    )


class VerifyTestsTool(Tool):
    """Run the existing tests against the current code, read-only, against the baseline."""

    name = "verify_tests"
    description = (
        "Run the tester's existing tests under tests/ against your current code/, read-only: "
        "nothing is written to runs/ and no bug is opened; the tester's own run stays the "
        "verdict. In a retry the runtime ran them once before your first edit (the BASELINE); "
        "this VERIFY run says which failures are fixed, which still fail, and which tests "
        "passed in the baseline but fail now (regressions), each failure with its hint."
    )
    Input = NoInput

    def run(self, ctx: ToolContext, args: NoInput) -> ToolResult:
        role = services(ctx)
        if role.runner is None:
            return ToolResult("verify_tests is not available in this session", is_error=True)
        result = verify.run_existing_tests(ctx)
        if result is None:
            return ToolResult("no tests under tests/ yet: the tester writes them after you")
        payload = verify.report(role.baseline, result)
        return ToolResult(
            json.dumps(payload, ensure_ascii=False),
            data=payload,
            untrusted=True,
            tests=verify.tally(result),
        )
