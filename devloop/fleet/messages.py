"""What travels between the steps of a chain (JSON through Celery, never pickles)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from devloop.core.ids import ProjectId, UnitId

StepRole = Literal["coder", "tester"]


class StepMsg(BaseModel):
    """Which unit attempt moves through coder -> tester -> decide: identity, never outcomes.

    What a step produced is read from the step records the workers stored; a field a
    sender adds (`tests_ok`, anything) is dropped, so a forged message can at most cause
    a redundant step, which the records and leases make idempotent.
    """

    model_config = ConfigDict(extra="ignore")

    pid: ProjectId
    unit_id: UnitId
    attempt: int
    mode: str = "implement"  # the coder's mode: implement | retry | resume
    tester_try: int = 1  # the tester tries again (a crashed run, its own failure), same attempt
    skip_coder: bool = False  # a tester-only chain (a tester retry)
    sent_at: float | None = None  # when the chain was sent (queue wait = start - sent_at)
    # The project's cancel count when the chain was sent: a cancel revokes the queued task
    # ids of its epoch, so chains sent after it carry new ones (`~{epoch}`).
    epoch: int = 0

    @property
    def run_id(self) -> str:
        """The tester's run id: deterministic per attempt and try."""
        return f"run-{self.attempt}-{self.tester_try}"

    def task_id(self, role: str) -> str:
        """`{pid}:{unit}:{role}:{attempt}` (a tester retry adds its try; a chain sent after
        a cancel, `~{epoch}`)."""
        label = (
            f"{self.attempt}"
            if role == "coder" or self.tester_try == 1
            else (f"{self.attempt}.{self.tester_try}")
        )
        suffix = f"~{self.epoch}" if self.epoch else ""
        return f"{self.pid}:{self.unit_id}:{role}:{label}{suffix}"


class Dispatch(BaseModel):
    """A chain to send: full (coder -> tester -> decide) or tester-only (tester -> decide)."""

    model_config = ConfigDict(extra="forbid")

    msg: StepMsg
    countdown_s: float = 0.0

    @property
    def tester_only(self) -> bool:
        return self.msg.skip_coder
