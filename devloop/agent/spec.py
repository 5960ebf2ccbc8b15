"""What is fixed about a session, and the seams the loop talks to (checkpoints, the view)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from devloop.agent.stuck import StuckThresholds


@dataclass(frozen=True)
class Budgets:
    """Limits that end a session; each has its own terminal reason."""

    max_turns: int = 60
    max_tokens: int = 3_000_000
    max_usd: float = 10.0
    max_wall_s: float = 1800.0


@dataclass(frozen=True)
class SessionSpec:
    """Everything fixed about one session."""

    session_key: str
    flavor: str
    mode: str
    attempt: int
    model: str
    system: str
    max_tokens: int = 8192
    budgets: Budgets = field(default_factory=Budgets)
    stuck: StuckThresholds = field(default_factory=StuckThresholds)
    context_budget_tokens: int = 150_000
    self_check_rounds: int = 2
    reassess_limit: int = 1
    # Reassess may put back the files of the state where most tests passed (a coder's code);
    # a tester's tests passing more is not progress, so a tester is never offered it.
    revert_to_best: bool = True
    # A second session within one attempt (the tester tries again): a new identity in the
    # checkpoint, so the try gets model turns of its own instead of the last try's result.
    try_no: int = 1


class Checkpointer(Protocol):
    """Where a session's state is saved after every step."""

    def load(self, key: str) -> dict[str, Any] | None: ...

    def save(self, key: str, state: dict[str, Any]) -> None: ...


class WorkspaceHooks(Protocol):
    """What the loop needs from the view: change detection and crash-safe snapshots."""

    def fingerprint(self) -> str: ...

    def snapshot(self) -> dict[str, str | None]: ...

    def restore(self, snapshot: dict[str, str | None]) -> None: ...

    def describe_changes(self) -> str: ...

    def revert_to(self, snapshot: dict[str, str | None]) -> None: ...


@dataclass(frozen=True)
class CheckReport:
    """What the runtime's self-check found when the model said it was done.

    `failures` are the work's (code, tests, contract, sandbox): handed back at most
    `self_check_rounds` times, then the session is `validation_failed`. `owed` is what
    only the model can give and the runtime cannot derive (its plan, its reflection):
    asked for once, by name; still missing at the next end, it is recorded as missing
    (`SessionResult.paperwork_missing`) and never fails the session.
    """

    failures: list[str] = field(default_factory=list)
    owed: list[str] = field(default_factory=list)


# A plain list is all failures (a check with nothing to ask of the model).
SelfCheck = Callable[[], CheckReport | list[str]]


class Reassess(Protocol):
    """(why it is stuck, the last error, what changed, the best state it could go back
    to) -> the plan to pin."""

    def __call__(
        self, reason: str, last_error: str | None, changes: str, best: str | None = None
    ) -> str: ...
