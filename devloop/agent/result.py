"""The stable payload of a finished session (round-trip tested; other tools read it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from devloop.llm.base import Usage

SessionStatus = Literal[
    "completed", "failed", "cancelled", "recovery_required", "budget_exceeded", "stuck"
]


class SessionResult(BaseModel):
    """How a session ended, what it said, and what it cost."""

    model_config = ConfigDict(extra="forbid")

    session_key: str
    flavor: str
    mode: str
    attempt: int
    status: SessionStatus
    # Why it ended, finer than status: end_turn, validation_failed, budget_turns,
    # budget_tokens, budget_usd, budget_wall_time, stuck, refusal, llm_error, ...
    terminal_reason: str
    final_text: str
    failure_summary: str | None = None
    usage: Usage
    cost_usd: float = 0.0
    turns: int
    duration_ms: int
    self_check_failures: list[str] = []
    changed_files: list[str] = []
    # What the model still owed when the session ended, after it was asked once by name
    # (its plan, its reflection): recorded as missing, never a failure of the session.
    paperwork_missing: list[str] = []
