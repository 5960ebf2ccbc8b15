"""The console's blocking reads of a project's streams (XREAD BLOCK, asyncio).

A reader asks for stream handles (`events`, `timeline`, `unit_timeline`, `output`): opaque
names it only hands back to `read` and compares with the keys of its reply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import redis
import redis.asyncio as aioredis

from devloop.store.keys import EVENTS_MAXLEN, Keys

BLOCK_MS = 10_000
BATCH = 200  # entries per stream per read
RETRY_S = 1.0
Entry = tuple[str, dict[bytes, bytes]]
Reply = list[tuple[bytes, list[Entry]]]


class LiveFeed:
    """An asyncio client's reads of the events, timeline and output streams."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client

    @classmethod
    def from_url(cls, url: str) -> LiveFeed:
        """A feed over a new client of a redis://, rediss://, unix:// or redis+socket://
        URL."""
        scheme, sep, rest = url.partition("://")
        if sep and scheme in ("redis+socket", "socket"):
            url = "unix://" + rest
        # A blocked XREAD waits BLOCK_MS: the socket must wait longer than that.
        return cls(aioredis.Redis.from_url(url, socket_timeout=BLOCK_MS / 1000 + 15))

    async def close(self) -> None:
        await self.client.aclose()  # type: ignore[attr-defined]

    @staticmethod
    def events(pid: str) -> bytes:
        """The handle of the project's live events stream."""
        return Keys(pid).events.encode()

    @staticmethod
    def timeline(pid: str) -> bytes:
        """The handle of the project's timeline ledger."""
        return Keys(pid).stream("timeline").encode()

    async def unit_timeline(self, pid: str, unit: str) -> bytes:
        """The handle of the unit's own timeline entries (the ledger's ids), or of the
        whole ledger while it is not indexed by unit yet."""
        keys = Keys(pid)
        indexed = await self.client.hget(keys.ledger_index, "timeline")
        return (keys.unit_ledger("timeline", unit) if indexed
                else keys.stream("timeline")).encode()

    @staticmethod
    def output(pid: str, unit: str, run_id: str) -> bytes:
        """The handle of one test run's live output."""
        return Keys(pid).output(unit, run_id).encode()

    async def read(self, streams: Mapping[bytes, str], block_ms: int = BLOCK_MS) -> Reply | None:
        """The entries after each stream's position (up to BATCH each), waiting up to
        block_ms for one; None when there is none or Redis is away (a restart is a pause of
        the stream, not its end)."""
        try:
            reply: Any = await self.client.xread(dict(streams), block=block_ms, count=BATCH)
        except redis.RedisError:
            await anyio.sleep(RETRY_S)
            return None
        if not reply:
            return None
        return [(key, [(i.decode(), fields) for i, fields in entries])
                for key, entries in reply]

    async def trimmed_past(self, stream: bytes, last_id: str) -> bool:
        """Whether entries after last_id may have been trimmed before a reader saw them: the
        stream is at its cap and the entry last_id itself is gone (trimming drops the oldest
        first, so while it is there, everything after it is too)."""
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.xlen(stream)
                pipe.xrange(stream, min=last_id, max=last_id)
                length, still = await pipe.execute()
        except redis.RedisError:
            return False
        return bool(length >= EVENTS_MAXLEN and not still)
