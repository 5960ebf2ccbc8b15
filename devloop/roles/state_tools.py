"""Progress and memory tools shared by every writing role: todolist, runtime state, timeline."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, Field

from devloop.agent.tools import ProgressEvent, Tool, ToolContext, ToolResult
from devloop.ledgers.timeline import ROLE_KINDS
from devloop.roles import derive, verify
from devloop.roles.services import RoleServices

TodoStatus = Literal["pending", "in_progress", "done", "skipped"]


def services(ctx: ToolContext) -> RoleServices:
    """The role services of a session."""
    role: RoleServices = ctx.services["role"]
    return role


class TodoItem(BaseModel):
    id: str = Field(description="Step id, e.g. step-001")
    title: str


class WriteTodolistInput(BaseModel):
    items: list[TodoItem] = Field(min_length=1, description="The plan, in order.")


class WriteTodolistTool(Tool):
    """Write the session's plan as a todolist (replacing any earlier one)."""

    name = "write_todolist"
    description = (
        "Write your plan as a todolist before you start. Each item has an id (step-001, "
        "step-002, ...) and a title. Mark items with update_todo_item as you go."
    )
    Input = WriteTodolistInput

    def run(self, ctx: ToolContext, args: WriteTodolistInput) -> ToolResult:
        role = services(ctx)
        if verify.needs_workflow(role):
            missing = verify.missing_workflow([i.title for i in args.items])
            if missing:
                return ToolResult(
                    f"refused: a retry's plan states its workflow; no item starts with "
                    f"{', '.join(missing)}. Add three items titled like: "
                    f"{verify.WORKFLOW_TEMPLATE}",
                    is_error=True,
                )
        role.todo = [{"id": i.id, "title": i.title, "status": "pending"} for i in args.items]
        role.persist_todo()
        ctx.emit(ProgressEvent("todo", step=0, total=len(role.todo)))
        return ToolResult(f"todolist written: {len(role.todo)} items")


class UpdateTodoInput(BaseModel):
    id: str
    status: TodoStatus
    output_ref: str | None = Field(default=None, description="A file or run id it produced.")


class UpdateTodoItemTool(Tool):
    """Mark one todolist item."""

    name = "update_todo_item"
    description = (
        "Mark a todolist item pending, in_progress, done or skipped, right after it changes."
    )
    Input = UpdateTodoInput

    def run(self, ctx: ToolContext, args: UpdateTodoInput) -> ToolResult:
        role = services(ctx)
        item = next((i for i in role.todo if i["id"] == args.id), None)
        if item is None:
            known = ", ".join(i["id"] for i in role.todo) or "none (call write_todolist first)"
            return ToolResult(f"no todo item {args.id!r}; items: {known}", is_error=True)
        item["status"] = args.status
        if args.output_ref:
            item["output_ref"] = args.output_ref
        role.persist_todo()
        done = sum(i["status"] in ("done", "skipped") for i in role.todo)
        ctx.emit(ProgressEvent("todo", step=done, total=len(role.todo)))
        return ToolResult(f"{args.id}: {args.status} ({done}/{len(role.todo)} done)")


class RuntimeStateInput(BaseModel):
    step: int = Field(ge=0)
    total: int = Field(ge=1)


class UpdateRuntimeStateTool(Tool):
    """Report progress as step of total."""

    name = "update_runtime_state"
    description = "Report your progress as step of total (shown to the people watching)."
    Input = RuntimeStateInput

    def run(self, ctx: ToolContext, args: RuntimeStateInput) -> ToolResult:
        role = services(ctx)
        role.runtime.update(step=args.step, total=args.total, status="running")
        role.persist_runtime()
        ctx.emit(ProgressEvent("runtime_state", step=args.step, total=args.total))
        return ToolResult(f"runtime state: {args.step}/{args.total}")


class TimelineInput(BaseModel):
    kind: str = Field(description="unit_coded, code_patched, unit_tested, test_failed, test_passed")
    ref: str | None = Field(default=None, description="A file, run id or bug id.")
    summary: str = Field(max_length=500)


class TimelineAppendTool(Tool):
    """Say a line about a timeline event; the runtime records the event itself."""

    name = "timeline_append"
    description = (
        "Add your one-line summary to a timeline event of this attempt: kind (unit_coded, "
        "code_patched, unit_tested, test_failed, test_passed), a ref, and the summary. The "
        "runtime records each event itself, once, from the facts (a commit of code/, the "
        "run that stands and its verdict); your summary goes on it. Optional."
    )
    Input = TimelineInput

    def run(self, ctx: ToolContext, args: TimelineInput) -> ToolResult:
        role = services(ctx)
        own = ROLE_KINDS.get(role.role, ())
        if args.kind not in own:
            # loop_* and other system events are the loop's: a session cannot forge a verdict.
            return ToolResult(
                f"kind {args.kind!r} is not one a {role.role} may append; use one of: "
                f"{', '.join(own) or 'none'} (loop events are written by the loop alone)",
                is_error=True,
            )
        # Facts are the runtime's: the event is written once, from the commit or the run
        # (derive.record_commit, derive.record_run); the model's words are its narrative.
        return ToolResult(derive.note(role, args.kind, args.summary))


class MemoryInput(BaseModel):
    topic: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,60}$")
    content: str = Field(min_length=1, max_length=4000)
    relevance: float = Field(ge=0, le=1)


class RecordMemoryTool(Tool):
    """Keep a note for later sessions of this role (use sparingly)."""

    name = "record_memory"
    description = (
        "Save a short note future sessions of your role will see (a convention or a "
        "pitfall worth remembering across units). Use rarely; never for unit-specific facts."
    )
    Input = MemoryInput

    def run(self, ctx: ToolContext, args: MemoryInput) -> ToolResult:
        role = services(ctx)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "-", args.topic.strip()).strip("-").lower()
        note = f"---\ntopic: {args.topic}\nrelevance: {args.relevance}\n---\n{args.content}\n"
        role.save_memory(name, note)
        return ToolResult(
            f"memory saved: {role.role}/pending/{role.unit_id}/{name}.md (this unit's sessions "
            "see it now, other units' once this unit passes)"
        )
