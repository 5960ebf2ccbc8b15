"""Bash: one shell command in the role's sandbox, with the unit dir as cwd."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from devloop.agent.tools import Tool, ToolContext, ToolResult
from devloop.core.writeset import writable_roots

# Package installs: when one of these runs out of time, the registry or the network was
# slow, not the model wrong (coder spec: "npm install timeout -> retry; infra_flake").
INSTALL = re.compile(
    r"(?:^|[\s;&|(])(?:npm\s+(?:install|i|ci|add)|yarn(?:\s+(?:install|add))?(?=\s|$)|"
    r"pnpm\s+(?:install|i|add)|pip3?\s+install|python3?\s+-m\s+pip\s+install|"
    r"poetry\s+(?:install|add)|uv\s+(?:pip\s+install|sync|add))\b"
)


def is_install(command: str) -> bool:
    """Whether a shell command installs packages (npm/yarn/pnpm/pip/poetry/uv)."""
    return INSTALL.search(command) is not None


class BashInput(BaseModel):
    command: str = Field(description="A shell command (run with /bin/sh -c).")
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        le=600,
        description="Wall-clock limit in seconds; at most your role's limit (coder 600, tester "
        "60), which is also the default.",
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
        limit = min(args.timeout_s or ctx.command_timeout_s, ctx.command_timeout_s)
        obs = ctx.sandbox.run(
            args.command,
            view=ctx.view,
            cwd=ctx.unit_rel,
            writable=writable,
            timeout_s=limit,
            # Over the write set: the files only their tools write stay read-only.
            ro_binds=[*ctx.ro_binds, *ctx.record_binds()],
            tmpfs=ctx.tmpfs,
        )
        if obs.refused:
            return ToolResult(obs.refused, is_error=True, data=obs.model_dump())
        killed = (" (killed: out of memory, all its processes together)"
                  if obs.limit == "memory" else " (timed out)" if obs.timed_out else "")
        parts = [f"exit code {obs.exit_code}{killed}"]
        if obs.stdout:
            parts.append("stdout:\n" + obs.stdout)
        if obs.stderr:
            parts.append("stderr:\n" + obs.stderr)
        flake = None
        if obs.timed_out and obs.limit != "memory" and is_install(args.command):
            flake = f"a package install timed out after {limit:g} s: {args.command[:200]}"
        return ToolResult(
            "\n".join(parts),
            is_error=obs.exit_code != 0,
            data=obs.model_dump(),
            untrusted=True,
            infra_flake=flake,
        )
