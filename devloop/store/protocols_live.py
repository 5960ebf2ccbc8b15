"""What the live side needs of a store: the events stream, test runs' output, and the
reads the live status makes of each unit and of the project.

RedisStore is the real one; MemoryLive (store/inmemory_live.py) keeps the same in plain
Python for tests of the decisions made on top (tests/store/test_live_contract.py holds
both to the same assertions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from devloop.store.live import EventsRead, SharedRead, UnitRead
from devloop.store.livefeed import Reply
from devloop.store.output import OutputSoFar


class EventStore(Protocol):
    """The project's live events stream: appended to, read after a position, capped."""

    def add_event(self, pid: str, fields: Mapping[str, str | int]) -> str: ...

    def last_event_id(self, pid: str) -> str: ...

    def events_after(self, pid: str, cursor: str) -> EventsRead: ...


class OutputStore(Protocol):
    """Test runs' live output: a stream per run, the last few runs of a unit kept."""

    def start_output(self, pid: str, unit: str, run_id: str, keep: int) -> None: ...

    def add_output(self, pid: str, unit: str, run_id: str, chunks: Mapping[str, str],
                   end: bool = False) -> None: ...

    def latest_output_run(self, pid: str, unit: str) -> str | None: ...

    def output_runs(self, pid: str, unit: str) -> list[str]: ...

    def read_output(self, pid: str, unit: str, run_id: str | None,
                    after: str = "0-0") -> OutputSoFar: ...


class LiveStore(EventStore, OutputStore, Protocol):
    """Both: what a console page and the live status follow."""


class LiveStatusStore(EventStore, Protocol):
    """What the live status reads (fleet/livestatus.py): the units, the events since its
    last look, each named unit's inputs and what every row shares."""

    def unit_ids(self, pid: str) -> list[str]: ...

    def unit_reads(self, pid: str, units: Sequence[str]) -> list[UnitRead]: ...

    def shared_read(self, pid: str, leases: Sequence[tuple[str, int, str]],
                    moving: Sequence[str], run_file: str) -> SharedRead: ...


class StreamFeed(Protocol):
    """The console's blocking reads of a project's streams: handles handed out, then read
    after a position each (store/livefeed.py; MemoryFeed in inmemory_live.py)."""

    async def close(self) -> None: ...

    def events(self, pid: str) -> bytes: ...

    def timeline(self, pid: str) -> bytes: ...

    async def unit_timeline(self, pid: str, unit: str) -> bytes: ...

    def output(self, pid: str, unit: str, run_id: str) -> bytes: ...

    async def read(self, streams: Mapping[bytes, str], block_ms: int = ...) -> Reply | None: ...

    async def trimmed_past(self, stream: bytes, last_id: str) -> bool: ...
