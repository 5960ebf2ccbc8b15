"""syntax_check: the runtime's own syntax check of code/, the one the self-check runs."""

from __future__ import annotations

import json

from pydantic import BaseModel

from devloop.agent.tools import Tool, ToolContext, ToolResult
from devloop.core.errors import CheckInterrupted
from devloop.roles.checks import syntax_command, syntax_problems
from devloop.roles.state_tools import services


class NoInput(BaseModel):
    pass


class SyntaxCheckTool(Tool):
    """Run the stack's syntax check over code/ in the sandbox, as the self-check will."""

    name = "syntax_check"
    description = (
        "Run the runtime's own syntax check over code/ (the command the self-check runs: "
        "python's py_compile, `node --check`, or for Vue units a vite build that writes "
        "nothing) and say ok or what failed. Returns the command it ran."
    )
    Input = NoInput

    def run(self, ctx: ToolContext, args: NoInput) -> ToolResult:
        role = services(ctx)
        command = syntax_command(ctx.unit_dir, role.stack, role.kind)
        if command is None:
            return ToolResult("code/ has no source files to check", is_error=True)
        if ctx.sandbox is None:
            return ToolResult("syntax_check is not available in this session", is_error=True)
        obs = ctx.sandbox.run(
            command, view=ctx.view, cwd=ctx.unit_rel, writable=[], timeout_s=120,
            ro_binds=ctx.ro_binds, tmpfs=ctx.tmpfs,
        )
        try:
            problems = syntax_problems(obs)
        except CheckInterrupted as exc:
            return ToolResult(f"the check was interrupted: {exc}; call it again", is_error=True)
        payload = {"ok": not problems, "problems": problems, "command": command}
        return ToolResult(json.dumps(payload, ensure_ascii=False), data=payload,
                          is_error=bool(problems), untrusted=bool(problems))
