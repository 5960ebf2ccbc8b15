"""The reassess turn: a read-only session that re-plans a stuck one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from devloop.agent.flavors import toolset
from devloop.agent.loop import AgentSession
from devloop.agent.spec import Budgets, Checkpointer, Reassess, SessionSpec
from devloop.agent.tools import Tool, ToolContext
from devloop.llm.base import LLMProvider
from devloop.prompts import render


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

    def reassess(reason: str, last_error: str | None, changes: str) -> str:
        nonlocal runs
        runs += 1
        spec = SessionSpec(
            session_key=f"{parent.session_key}.reassess.{parent.attempt}.{runs}",
            flavor="reassess", mode="reassess", attempt=parent.attempt, model=parent.model,
            system=render("reassess", role=parent.flavor, unit_id=ctx.unit_id, reason=reason,
                          last_error=last_error, changes=changes),
            max_tokens=parent.max_tokens, budgets=Budgets(max_turns=max_turns),
            reassess_limit=0,
        )
        # Nothing is writable: Write/Edit are not in the flavor, and Bash binds nothing rw.
        read_only = dataclasses.replace(ctx, role="reassess", write_patterns=())
        session = AgentSession(spec, provider, toolset("reassess", built), read_only,
                               checkpointer_for(runs))
        result = session.run("Review the stuck session and write the plan.")
        return session.final_plan() or f"(reassess ended {result.status}: no plan)"

    return reassess
