"""Read, Write and Edit: file tools confined to the view and the role's write set."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from devloop.agent.tools import Tool, ToolContext, ToolResult


class ReadInput(BaseModel):
    path: str = Field(description="File path relative to the unit dir, e.g. code/server.js")
    offset: int = Field(default=1, ge=1, description="First line to return (1-based).")
    limit: int = Field(default=400, ge=1, le=5000, description="Most lines to return.")


class ReadTool(Tool):
    """Read a file of the view, by line range, capped in size."""

    name = "Read"
    description = (
        "Read a text file. Paths are relative to your unit dir (code/server.js, spec.json, "
        "../other-unit/contract.json, ../../units.json). Returns numbered lines; use offset "
        "and limit for long files. Only your view is readable: other units' code is absent."
    )
    Input = ReadInput

    def run(self, ctx: ToolContext, args: ReadInput) -> ToolResult:
        resolved = ctx.resolve(args.path)
        if isinstance(resolved, str):
            return ToolResult(resolved, is_error=True)
        host, _ = resolved
        if host.is_dir():
            entries = sorted(p.name + ("/" if p.is_dir() else "") for p in host.iterdir())
            return ToolResult(f"{args.path} is a directory: " + " ".join(entries), untrusted=True)
        if not host.is_file():
            return ToolResult(f"{args.path}: no such file", is_error=True)
        data = host.read_bytes()[: ctx.read_cap_bytes]
        text = data.decode("utf-8", errors="replace")
        lines = text.splitlines()
        chosen = lines[args.offset - 1 : args.offset - 1 + args.limit]
        body = "\n".join(f"{n:>5}  {line}" for n, line in enumerate(chosen, args.offset))
        more = len(lines) - (args.offset - 1 + len(chosen))
        if more > 0:
            body += f"\n[{more} more lines: read again with offset={args.offset + len(chosen)}]"
        if host.stat().st_size > ctx.read_cap_bytes:
            body += f"\n[file is larger than {ctx.read_cap_bytes} bytes: the rest is not shown]"
        return ToolResult(body or "(empty file)", untrusted=True)


def _check_writable(ctx: ToolContext, path: str) -> tuple[Path, str] | ToolResult:
    """The host path to write, or the denial the model sees."""
    resolved = ctx.resolve(path)
    if isinstance(resolved, str):
        return ToolResult(resolved, is_error=True)
    host, rel = resolved
    if not ctx.may_write(rel):
        allowed = ", ".join(ctx.write_patterns) or "nothing"
        return ToolResult(
            f"denied: {path} is outside what the {ctx.role} may write ({allowed})", is_error=True
        )
    return host, rel


def _write_file(host: Path, content: str) -> None:
    host.parent.mkdir(parents=True, exist_ok=True)
    tmp = host.with_name(f".{host.name}.tmp")
    tmp.write_text(content, encoding="utf-8")
    os.replace(tmp, host)


class WriteInput(BaseModel):
    path: str = Field(description="File path relative to the unit dir, e.g. code/service.js")
    content: str = Field(description="The whole new content of the file.")


class WriteTool(Tool):
    """Create or overwrite a file inside the role's write set."""

    name = "Write"
    description = (
        "Create a file, or replace a file's whole content. Paths are relative to your unit "
        "dir and must be inside what your role may write; prefer Edit for small changes."
    )
    Input = WriteInput
    writes = True

    def run(self, ctx: ToolContext, args: WriteInput) -> ToolResult:
        checked = _check_writable(ctx, args.path)
        if isinstance(checked, ToolResult):
            return checked
        host, rel = checked
        existed = host.exists()
        _write_file(host, args.content)
        verb = "overwrote" if existed else "created"
        return ToolResult(
            f"{verb} {rel} ({len(args.content.encode())} bytes)", changed_files=(rel,)
        )


class EditInput(BaseModel):
    path: str = Field(description="File path relative to the unit dir.")
    old: str = Field(description="Exact text to replace; must occur exactly once.")
    new: str = Field(description="Replacement text.")


class EditTool(Tool):
    """Replace one exact, unique occurrence of a text in a file."""

    name = "Edit"
    description = (
        "Replace an exact snippet of a file with new text. `old` must match the file "
        "character for character and occur exactly once: include surrounding lines to make "
        "it unique."
    )
    Input = EditInput
    writes = True

    def run(self, ctx: ToolContext, args: EditInput) -> ToolResult:
        checked = _check_writable(ctx, args.path)
        if isinstance(checked, ToolResult):
            return checked
        host, rel = checked
        if not host.is_file():
            return ToolResult(f"{args.path}: no such file (use Write to create it)", True)
        text = host.read_text(encoding="utf-8", errors="replace")
        count = text.count(args.old) if args.old else 0
        if count == 0:
            return ToolResult(
                f"{args.path}: `old` was not found; Read the file and copy the text exactly "
                "(whitespace included)",
                is_error=True,
            )
        if count > 1:
            return ToolResult(
                f"{args.path}: `old` occurs {count} times; include more surrounding lines so "
                "it matches exactly once",
                is_error=True,
            )
        _write_file(host, text.replace(args.old, args.new, 1))
        return ToolResult(f"edited {rel}", changed_files=(rel,))
