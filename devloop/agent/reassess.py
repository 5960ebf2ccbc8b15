"""The reassess turn: a read-only session that re-plans a stuck one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from devloop.agent.flavors import toolset
from devloop.agent.prompts import render
from devloop.agent.spec import Budgets, Checkpointer, Reassess, SessionSpec
from devloop.agent.toolloop import AgentSession
from devloop.agent.tools import Tool, ToolContext
from devloop.agent.untrusted import wrap_untrusted
from devloop.llm.base import LLMProvider


def make_reassess(
    parent: SessionSpec,
    provider: LLMProvider,
    tools: Iterable[Tool],
    ctx: ToolContext,
    checkpointer_for: Callable[[int], Checkpointer],
    max_turns: int = 6,
) -> Reassess:
    """A Reassess callable that runs a fresh read-only session and returns its plan."""
    built = list(tools)
    runs = 0

    def reassess(
        reason: str, last_error: str | None, changes: str, best: str | None = None
    ) -> str:
        nonlocal runs
        runs += 1
        spec = SessionSpec(
            session_key=f"{parent.session_key}.reassess.{parent.attempt}.{runs}",
            flavor="reassess",
            mode="reassess",
            attempt=parent.attempt,
            model=parent.model,
            system=render("reassess", role=parent.flavor, unit_id=ctx.unit_id),
            max_tokens=parent.max_tokens,
            budgets=Budgets(max_turns=max_turns),
            reassess_limit=0,
        )
        # Nothing is writable: Write/Edit are not in the flavor, and Bash binds nothing rw.
        read_only = dataclasses.replace(ctx, role="reassess", write_patterns=())
        session = AgentSession(
            spec, provider, toolset("reassess", built), read_only, checkpointer_for(runs)
        )
        result = session.run(_review_task(reason, last_error, changes, best))
        return session.final_plan() or f"(reassess ended {result.status}: no plan)"

    return reassess


def _review_task(reason: str, last_error: str | None, changes: str, best: str | None) -> str:
    """The reassess session's first message: what was measured, as wrapped data."""
    parts = [wrap_untrusted("why the session was judged stuck (measured)", reason)]
    if last_error:
        parts.append(wrap_untrusted("the last error the session met (tool output)", last_error))
    parts.append(wrap_untrusted("what the session changed since it started", changes))
    if best:
        parts.append(
            "More tests passed earlier than now (measured by the runtime): "
            f"{best} If the later edits broke what worked, end your plan with a line "
            "`REVERT` and the runtime puts those files back before the session continues."
        )
    return "\n".join([*parts, "Review the stuck session and write the plan."])
