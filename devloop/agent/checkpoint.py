"""Session checkpoints in the store: one transcript per (role, unit), reused across attempts."""

from __future__ import annotations

from typing import Any

from devloop.store import Fence, RedisStore


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
