"""The ledgers' Redis form: one stream entry per appended record (`AppendSink` shape)."""

from __future__ import annotations

from typing import Any

import redis

from devloop.store.fence import Fence, fenced_call

STREAM_FIELD = b"line"


def entry_lines(fields: dict[Any, Any]) -> list[str]:
    """The lines of one stream entry's record (a record may span several lines)."""
    value = fields.get(STREAM_FIELD, fields.get(STREAM_FIELD.decode(), b""))
    record = value.decode("utf-8") if isinstance(value, bytes) else str(value)
    return record.split("\n")


class RedisStreamSink:
    """An append-only ledger in a Redis stream, safe for many writers on many hosts."""

    def __init__(self, client: redis.Redis, key: str, fence: Fence | None = None) -> None:
        self.client = client
        self.key = key
        self.fence = fence  # a step's lease: its appends land only while it holds it

    def __repr__(self) -> str:
        return f"RedisStreamSink({self.key!r})"

    def append(self, line: str) -> None:
        """Store one record as one entry (XADD is atomic; the final newline is implied)."""
        data = line.removesuffix("\n").encode("utf-8")
        if self.fence is not None:
            fenced_call(self.client, self.fence, [self.key], "XADD", self.key, "*",
                        STREAM_FIELD, data)
            return
        self.client.xadd(self.key, {STREAM_FIELD: data})

    def lines(self) -> list[str]:
        """Every line of every record, in append order, without the newlines."""
        out: list[str] = []
        for _id, fields in self.client.xrange(self.key):
            out += entry_lines(fields)
        return out
