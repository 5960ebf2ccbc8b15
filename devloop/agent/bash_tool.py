"""Bash: one shell command in the role's sandbox, with the unit dir as cwd."""

from __future__ import annotations

from pydantic import BaseModel, Field

from devloop.agent.tools import Tool, ToolContext, ToolResult
from devloop.writeset import writable_roots


class BashInput(BaseModel):
    command: str = Field(description="A shell command (run with /bin/sh -c).")
    timeout_s: float | None = Field(
        default=None, gt=0, le=600, description="Wall-clock limit in seconds (default 600)."
    )


class BashTool(Tool):
    """Run a command under the sandbox: no network, only the write set writable."""

    name = "Bash"
    description = (
        "Run a shell command in your unit dir inside a sandbox: no network, a private /tmp, "
        "only your write set is writable, output capped. Send JSON bodies from a file "
        "(curl -d @/tmp/body.json), never inline."
    )
    Input = BashInput

    def run(self, ctx: ToolContext, args: BashInput) -> ToolResult:
        if ctx.sandbox is None:
            return ToolResult("Bash is not available in this session", is_error=True)
        writable = [f"{ctx.unit_rel}/{p}" for p in writable_roots(ctx.write_patterns)]
        obs = ctx.sandbox.run(
            args.command,
            view=ctx.view,
            cwd=ctx.unit_rel,
            writable=writable,
            timeout_s=args.timeout_s or ctx.command_timeout_s,
            ro_binds=ctx.ro_binds,
            tmpfs=ctx.tmpfs,
        )
        if obs.refused:
            return ToolResult(obs.refused, is_error=True, data=obs.model_dump())
        parts = [f"exit code {obs.exit_code}" + (" (timed out)" if obs.timed_out else "")]
        if obs.stdout:
            parts.append("stdout:\n" + obs.stdout)
        if obs.stderr:
            parts.append("stderr:\n" + obs.stderr)
        return ToolResult(
            "\n".join(parts), is_error=obs.exit_code != 0, data=obs.model_dump(), untrusted=True
        )
