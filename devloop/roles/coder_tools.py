"""The coder's own tools: contract hashing and bridging, sandbox check, coder.log."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from devloop.agent.tools import Tool, ToolContext, ToolResult
from devloop.contracts import ContractMissingExports, contract_bridge, hash_contract
from devloop.ledgers import DecisionInvalid, DirSink, append_decision
from devloop.roles.state_tools import services


class HashContractInput(BaseModel):
    contract: dict[str, Any] = Field(description="The contract object; its `exports` is hashed.")


class HashContractTool(Tool):
    """Compute a contract's version hash."""

    name = "hash_contract"
    description = (
        "Compute the version of a contract: sha256 of its canonical `exports`. Put the "
        "result in contract.json's `version`; never compute it by hand."
    )
    Input = HashContractInput

    def run(self, ctx: ToolContext, args: HashContractInput) -> ToolResult:
        try:
            return ToolResult(hash_contract(args.contract))
        except ContractMissingExports:
            return ToolResult("the contract has no `exports` object", is_error=True)


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
    changed_files: list[str] = Field(description="Unit-relative paths, e.g. code/server.js")


class AppendCoderLogInput(BaseModel):
    decision: Decision


class AppendCoderLogTool(Tool):
    """Append a structured decision block to coder.log."""

    name = "append_coder_log"
    description = (
        "Append your decision to coder.log. Every attempt needs this_fix, rationale and "
        "changed_files; a retry also needs last_failure and last_cause, written as: last "
        "time X failed, because Y; this time Z."
    )
    Input = AppendCoderLogInput

    def run(self, ctx: ToolContext, args: AppendCoderLogInput) -> ToolResult:
        decision = args.decision.model_dump(exclude_none=True)
        decision.setdefault("attempt", services(ctx).attempt)
        try:
            written = append_decision(DirSink(ctx.files, f"{ctx.unit_rel}/coder.log"), decision)
        except DecisionInvalid as exc:
            return ToolResult(str(exc), is_error=True)
        except OSError as exc:  # coder.log is a link, a fifo ...: the host does not follow it
            return ToolResult(f"coder.log: {getattr(exc, 'reason', exc)}", is_error=True)
        return ToolResult(
            f"coder.log: decision for attempt {written.attempt} appended",
            changed_files=("coder.log",),
        )
