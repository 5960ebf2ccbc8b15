"""Session checkpoints: the transcript of one (role, unit), overwritten after every turn."""

from __future__ import annotations

import json
from typing import Any

from devloop.store.base import StoreBase
from devloop.store.fence import Fence, fenced_call


class SessionsMixin(StoreBase):
    """`save_session`, `load_session` and `drop_session`."""

    def save_session(
        self,
        pid: str,
        role: str,
        unit: str,
        transcript: dict[str, Any],
        fence: Fence | None = None,
    ) -> None:
        """Checkpoint the transcript (one SET, so a reader sees the old or the new one);
        with a fence, only while the step's lease is still its own (LeaseLost if not)."""
        data = json.dumps(transcript, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        key = self.keys(pid).session(role, unit)
        if fence is not None:
            fenced_call(self.client, fence, [key], "SET", key, data)
        else:
            self.client.set(key, data)

    def load_session(self, pid: str, role: str, unit: str) -> dict[str, Any] | None:
        """The last checkpoint, or None when the session never ran."""
        raw = self.client.get(self.keys(pid).session(role, unit))
        if raw is None:
            return None
        loaded: dict[str, Any] = json.loads(raw)
        return loaded

    def drop_session(self, pid: str, role: str, unit: str) -> bool:
        """Forget a checkpoint (a fresh session next time); True if there was one."""
        return bool(self.client.delete(self.keys(pid).session(role, unit)))
