"""Read, Write and Edit: file tools confined to the view and the role's write set."""

from __future__ import annotations

import itertools
import os
import stat

from pydantic import BaseModel, Field

from devloop.agent.tools import Tool, ToolContext, ToolResult
from devloop.core.artifacts import content_refusal, name_refusal
from devloop.safe.safedir import Refused
from devloop.safe.safetree import printable

LISTING_CAP = 500


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
        rel, _ = resolved
        try:
            st = ctx.files.lstat(rel)
            if st is not None and stat.S_ISDIR(st.st_mode):
                listing = _listing(ctx, rel)
                return ToolResult(f"{args.path} is a directory: {listing}", untrusted=True)
            if st is None:
                return ToolResult(f"{args.path}: no such file", is_error=True)
            data, size = ctx.files.read_head(rel, ctx.read_cap_bytes)
        except OSError as exc:
            return ToolResult(_refused(args.path, exc), is_error=True)
        text = data.decode("utf-8", errors="replace")
        lines = text.splitlines()
        chosen = lines[args.offset - 1 : args.offset - 1 + args.limit]
        body = "\n".join(f"{n:>5}  {line}" for n, line in enumerate(chosen, args.offset))
        more = len(lines) - (args.offset - 1 + len(chosen))
        if more > 0:
            body += f"\n[{more} more lines: read again with offset={args.offset + len(chosen)}]"
        if size > ctx.read_cap_bytes:
            body += f"\n[file is larger than {ctx.read_cap_bytes} bytes: the rest is not shown]"
        return ToolResult(body or "(empty file)", untrusted=True)


def _listing(ctx: ToolContext, rel: str) -> str:
    """A directory's entries (dirs with a trailing /), at most LISTING_CAP of them."""
    with ctx.files.opendir(rel) as handle, os.scandir(handle.fd) as entries:
        found = [
            printable(e.name) + ("/" if e.is_dir(follow_symlinks=False) else "")
            for e in itertools.islice(entries, LISTING_CAP + 1)
        ]
    more = f" [more than {LISTING_CAP} entries: not all shown]" if len(found) > LISTING_CAP else ""
    return " ".join(sorted(found[:LISTING_CAP])) + more


def _refused(path: str, exc: OSError) -> str:
    """An access the view's handle refused (a link, a fifo, ...), as the model sees it."""
    why = exc.reason if isinstance(exc, Refused) else (exc.strerror or str(exc)).lower()
    return f"{path}: {why}"


def _check_writable(ctx: ToolContext, path: str) -> tuple[str, str] | ToolResult:
    """The view-relative path to write and its unit-relative form, or the denial."""
    resolved = ctx.resolve(path)
    if isinstance(resolved, str):
        return ToolResult(resolved, is_error=True)
    rel, unit_rel = resolved
    if not ctx.may_write(unit_rel):
        allowed = ", ".join(ctx.write_patterns) or "nothing"
        return ToolResult(
            f"denied: {path} is outside what the {ctx.role} may write ({allowed})", is_error=True
        )
    record = ctx.owner_of(unit_rel)
    if record is not None:
        return ToolResult(
            f"denied: {path} is written only by {record.owner}: {record.advice}", is_error=True
        )
    if (artifact := name_refusal(unit_rel)) is not None:
        return ToolResult(f"denied: {path} is {artifact}: your unit holds source only, and "
                          "such a file is never committed", is_error=True)
    return rel, unit_rel


def _unfit(path: str, unit_rel: str, content: str) -> ToolResult | None:
    """The denial of content that is not source text (a NUL, a bidi control), or None."""
    why = content_refusal(unit_rel, content.encode("utf-8", "surrogatepass"))
    if why is None:
        return None
    return ToolResult(f"denied: {path}: {why}; nothing was written", is_error=True)


class WriteInput(BaseModel):
    path: str = Field(description="File path relative to the unit dir, e.g. code/service.js")
    content: str = Field(description="The whole new content of the file.")


class WriteTool(Tool):
    """Create or overwrite a file inside the role's write set."""

    name = "Write"
    description = (
        "Create a file, or replace a file's whole content. Paths are relative to your unit "
        "dir and must be inside what your role may write."
    )
    Input = WriteInput
    writes = True

    def describe(self, available: frozenset[str] | None) -> str:
        """Edit is named only to a role that has it."""
        if available is not None and "Edit" not in available:
            return self.description
        return self.description.removesuffix(".") + "; prefer Edit for small changes."

    def run(self, ctx: ToolContext, args: WriteInput) -> ToolResult:
        checked = _check_writable(ctx, args.path)
        if isinstance(checked, ToolResult):
            return checked
        view_rel, rel = checked
        if (unfit := _unfit(args.path, rel, args.content)) is not None:
            return unfit
        try:
            existed = ctx.files.exists(view_rel)
            ctx.files.write_atomic(view_rel, args.content)
        except OSError as exc:
            return ToolResult(_refused(args.path, exc) + "; nothing was written", is_error=True)
        verb = "overwrote" if existed else "created"
        return ToolResult(
            f"{verb} {rel} ({len(args.content.encode())} bytes)",
            changed_files=(rel,),
            created_files=() if existed else (rel,),
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
        view_rel, rel = checked
        try:
            if not ctx.files.exists(view_rel):
                return ToolResult(f"{args.path}: no such file (use Write to create it)", True)
            text = ctx.files.read_text(view_rel)
        except OSError as exc:
            return ToolResult(_refused(args.path, exc), is_error=True)
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
        edited = text.replace(args.old, args.new, 1)
        if (unfit := _unfit(args.path, rel, edited)) is not None:
            return unfit
        try:
            ctx.files.write_atomic(view_rel, edited)
        except OSError as exc:
            return ToolResult(_refused(args.path, exc) + "; nothing was written", is_error=True)
        return ToolResult(f"edited {rel}", changed_files=(rel,))
