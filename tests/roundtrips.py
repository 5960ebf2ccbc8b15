"""A RedisStore that counts its round trips to Redis: one per command or pipeline sent."""

from __future__ import annotations

from typing import Any

from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore


class Counted(RedisStore):
    """A RedisStore over its own client, whose every send to the server is counted."""

    trips = 0

    def __init__(self, server: RedisServer) -> None:
        client = server.client()
        pool = client.connection_pool
        store = self

        class Counting(pool.connection_class):  # type: ignore[name-defined,misc]
            def send_packed_command(self, command: Any, check_health: bool = True) -> None:
                store.trips += 1
                super().send_packed_command(command, check_health)

        pool.connection_class = Counting
        super().__init__(client)

    def count(self) -> _Count:
        """`with store.count() as trips:` ... `trips.n` is the round trips made inside."""
        return _Count(self)


class _Count:
    def __init__(self, store: Counted) -> None:
        self.store, self.n = store, 0

    def __enter__(self) -> _Count:
        self.start = self.store.trips
        return self

    def __exit__(self, *exc: object) -> None:
        self.n = self.store.trips - self.start
