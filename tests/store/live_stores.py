"""The live side's stores the contract tests run on: RedisStore on the session's server, and
MemoryLive."""

from __future__ import annotations

import pytest

from devloop.store.inmemory_live import MemoryLive
from devloop.store.protocols_live import LiveStore

KINDS = ["redis", "memory"]


def live_store(request: pytest.FixtureRequest, events_cap: int | None = None) -> LiveStore:
    """The store the test's parameter names (a flushed server for "redis")."""
    if request.param == "redis":
        store: LiveStore = request.getfixturevalue("redis_store")
        return store
    return MemoryLive() if events_cap is None else MemoryLive(events_cap)
