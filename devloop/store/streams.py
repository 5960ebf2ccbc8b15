"""The ledgers' Redis form: one stream entry per appended record (`AppendSink` shape)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis

from devloop.store.fence import Fence, fenced_call
from devloop.store.keys import Keys, Ledger

if TYPE_CHECKING:
    from devloop.store.ledgerindex import LedgerIndex

STREAM_FIELD = b"line"


def entry_lines(fields: dict[Any, Any]) -> list[str]:
    """The lines of one stream entry's record (a record may span several lines)."""
    value = fields.get(STREAM_FIELD, fields.get(STREAM_FIELD.decode(), b""))
    record = value.decode("utf-8") if isinstance(value, bytes) else str(value)
    return record.split("\n")


class RedisStreamSink:
    """An append-only ledger in a Redis stream, safe for many writers on many hosts."""

    def __init__(self, client: redis.Redis, key: str, fence: Fence | None = None,
                 index: LedgerIndex | None = None) -> None:
        self.client = client
        self.key = key
        self.fence = fence  # a step's lease: its appends land only while it holds it
        self.index = index  # a project ledger's: each entry also goes to its unit's stream

    def __repr__(self) -> str:
        return f"RedisStreamSink({self.key!r})"

    def append(self, line: str) -> None:
        """Store one record as one entry (XADD is atomic; the final newline is implied)."""
        data = line.removesuffix("\n").encode("utf-8")
        if self.index is not None:
            self.index.append(self.client, data, self.fence)
            return
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


class UnitLedgerSink:
    """One unit's view of a project ledger: its entries read from the unit's stream
    (store/ledgerindex.py); appends go to the ledger."""

    def __init__(self, ledger: RedisStreamSink, unit: str) -> None:
        assert ledger.index is not None, "a unit's view needs an indexed ledger"
        self.ledger = ledger
        self.unit = unit

    def __repr__(self) -> str:
        return f"UnitLedgerSink({self.ledger.key!r}, {self.unit!r})"

    def append(self, line: str) -> None:
        self.ledger.append(line)

    def lines(self) -> list[str]:
        """The unit's lines (every line, while the ledger is not indexed yet)."""
        index = self.ledger.index
        assert index is not None
        return unit_lines(self.ledger.client, index.keys, index.ledger, self.unit)


def unit_lines(client: redis.Redis, keys: Keys, ledger: Ledger, unit: str) -> list[str]:
    """The lines of the unit's entries of a ledger, in order; the whole ledger's lines while
    it is not indexed (its reader filters them by unit, as it would anyway)."""
    with client.pipeline(transaction=False) as pipe:
        pipe.hget(keys.ledger_index, ledger)
        pipe.xrange(keys.unit_ledger(ledger, unit))
        indexed, entries = pipe.execute()
    if not indexed:
        entries = client.xrange(keys.stream(ledger))
    return [line for _id, fields in entries for line in entry_lines(fields)]
