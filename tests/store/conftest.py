"""The `store` of a contract test: each such test runs once on RedisStore (a real server)
and once on MemoryStore, with the same assertions."""

from __future__ import annotations

import pytest

from devloop.store import RedisStore
from devloop.store.inmemory import MemoryStore

BACKENDS = ["redis", "memory"]


@pytest.fixture(params=BACKENDS)
def any_store(request: pytest.FixtureRequest) -> RedisStore | MemoryStore:
    """A RedisStore over the flushed test server, or a new MemoryStore."""
    if request.param == "memory":
        return MemoryStore()
    redis_store: RedisStore = request.getfixturevalue("redis_store")
    return redis_store


def pause_events(store: RedisStore | MemoryStore, pid: str) -> list[str]:
    """The reasons of the project's `paused` live events, oldest first."""
    if isinstance(store, MemoryStore):
        return [e["reason"] for e in store.events[pid] if e["kind"] == "paused"]
    return [f[b"reason"].decode() for _, f in store.client.xrange(store.keys(pid).events)
            if f[b"kind"] == b"paused"]
