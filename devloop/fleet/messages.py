"""What travels between the steps of a chain (JSON through Celery, never pickles)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

StepRole = Literal["coder", "tester"]


class StepMsg(BaseModel):
    """One unit attempt moving through coder -> tester -> decide."""

    model_config = ConfigDict(extra="forbid")

    pid: str
    unit_id: str
    attempt: int
    mode: str = "implement"  # the coder's mode: implement | retry | resume
    tester_try: int = 1  # a crashed test run gets the tester once more, same attempt
    coder_status: str | None = None
    coder_reason: str | None = None
    tests_ok: bool | None = None
    crashed: bool | None = None
    crash_reason: str | None = None
    starved: bool | None = None  # the test run got too little CPU to judge the code
    failures: list[tuple[str, str]] = []
    hint: str | None = None
    skip_coder: bool = False  # a tester-only chain (retry after a crash)
    sent_at: float | None = None  # when the chain was sent (queue wait = start - sent_at)

    @property
    def run_id(self) -> str:
        """The tester's run id: deterministic per attempt and try."""
        return f"run-{self.attempt}-{self.tester_try}"

    def task_id(self, role: str) -> str:
        """`{pid}:{unit}:{role}:{attempt}` (a tester retry adds its try)."""
        label = (
            f"{self.attempt}"
            if role == "coder" or self.tester_try == 1
            else (f"{self.attempt}.{self.tester_try}")
        )
        return f"{self.pid}:{self.unit_id}:{role}:{label}"


class Dispatch(BaseModel):
    """A chain to send: full (coder -> tester -> decide) or tester-only (tester -> decide)."""

    model_config = ConfigDict(extra="forbid")

    msg: StepMsg
    countdown_s: float = 0.0

    @property
    def tester_only(self) -> bool:
        return self.msg.skip_coder
