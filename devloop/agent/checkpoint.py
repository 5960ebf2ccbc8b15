"""A session's checkpoint: its typed state, and where it is saved (one transcript per
(role, unit), reused across attempts)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from devloop.llm.base import Usage

if TYPE_CHECKING:
    from devloop.store import Fence, RedisStore

Snapshot = dict[str, str | None]  # a workspace's files (path -> content, None: absent)


class SessionState(BaseModel):
    """The whole state of a session, saved after every step so a process that dies resumes
    where it stopped. Stored as the JSON of a plain dict: a checkpoint saved before a field
    existed loads with that field's default, and keys this version does not know are kept."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    session_key: str = ""
    attempt: int = 1
    try_no: int = Field(1, alias="try")  # checkpoints from before tries were one try
    mode: str = ""
    messages: list[dict[str, Any]] = []  # the transcript, in the model API's shape
    next: str = "query"  # the step to run: query, tools or check
    turns: int = 0
    usage: Usage = Usage()
    cost_usd: float = 0.0
    elapsed_ms: int = 0
    self_checks: int = 0  # self-check rounds sent back to the model
    reassessed: int = 0  # reassess sessions run (their plans in `pinned`)
    pinned: list[str] = []
    reverted: int = 0  # times reassess had the best state's files put back
    stuck: dict[str, Any] = {}  # the StuckTracker's state
    changed_files: list[str] = []
    last_error: str | None = None
    workspace: Snapshot | None = None
    errors: list[list[str]] = []  # the errors window: [normalised, line], oldest first
    best: dict[str, Any] | None = None  # the run with most tests passing, and its files
    last_tests: dict[str, int] | None = None  # the last run's passed and total
    compacted: int = 0  # old turns summarised to fit the context
    reminded: bool = False  # what only the model can give was asked for (once)
    owed_only: bool = False  # after the reminder, nothing but that is owed
    paperwork_missing: list[str] = []
    self_check_failures: list[str] = []
    finished: bool = False
    result: dict[str, Any] | None = None  # the SessionResult, once finished

    @property
    def identity(self) -> tuple[int, int]:
        """(attempt, try) of the session this checkpoint is of."""
        return self.attempt, self.try_no

    def to_checkpoint(self) -> dict[str, Any]:
        """The plain dict a Checkpointer saves (the same keys as ever)."""
        return self.model_dump(mode="json", by_alias=True)


class StoreCheckpointer:
    """Saves a session's state under the store's session key of (pid, role, unit)."""

    def __init__(
        self, store: RedisStore, pid: str, role: str, unit: str, fence: Fence | None = None
    ) -> None:
        self.store, self.pid, self.role, self.unit = store, pid, role, unit
        self.fence = fence  # a step's lease: a taken-over step's saves fail (LeaseLost)

    def load(self, key: str) -> dict[str, Any] | None:
        """The last checkpoint, if any."""
        return self.store.load_session(self.pid, self.role, self.unit)

    def save(self, key: str, state: dict[str, Any]) -> None:
        """Overwrite the checkpoint."""
        self.store.save_session(self.pid, self.role, self.unit, state, fence=self.fence)
