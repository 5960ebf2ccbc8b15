"""The live side's store in plain Python: the events stream, test runs' output, and what
the live status reads of each unit (its state, step records, files' version, spend).

It keeps what RedisStore keeps, in the shape RedisStore returns it (entry ids `ms-seq`,
fields as bytes), so the code on top reads either the same way. Not shared between
processes: one process's tests and tools. tests/store/test_live_contract.py holds it and
RedisStore to the same assertions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

import anyio

from devloop.core.ids import check_id
from devloop.store.keys import EVENTS_MAXLEN
from devloop.store.live import Entry, EventsRead, SharedRead, UnitRead
from devloop.store.live import after as later
from devloop.store.livefeed import BATCH, BLOCK_MS, Reply
from devloop.store.output import OutputSoFar, output_so_far, run_event
from devloop.store.records import ProjectNotImported, UnitState
from devloop.store.state import state_event


def _fields(fields: Mapping[str, str | int | bytes]) -> dict[bytes, bytes]:
    """Fields as Redis gives them back: names and values as bytes."""
    return {k.encode(): v if isinstance(v, bytes) else str(v).encode()
            for k, v in fields.items()}


class MemoryLive:
    """The events stream (capped to events_cap, oldest first out) and each unit's last
    runs' output, per project, behind a lock (LiveOutput writes from its own thread)."""

    def __init__(self, events_cap: int = EVENTS_MAXLEN) -> None:
        self.events_cap = events_cap
        self._events: dict[str, list[Entry]] = {}
        self._runs: dict[tuple[str, str], list[str]] = {}  # (pid, unit) -> newest first
        self._output: dict[tuple[str, str, str], list[Entry]] = {}
        self._units: dict[str, list[str]] = {}
        self._states: dict[tuple[str, str], bytes] = {}  # as stored: UnitState JSON
        self._steps: dict[tuple[str, str], dict[bytes, bytes]] = {}
        self._timeline: dict[str, list[Entry]] = {}
        self._lock = threading.RLock()
        self._last = (0, 0)

    def _next_id(self) -> str:
        """An id after every id given before, as a stream's `ms-seq`."""
        ms, seq = int(time.time() * 1000), 0
        if ms <= self._last[0]:
            ms, seq = self._last[0], self._last[1] + 1
        self._last = (ms, seq)
        return f"{ms}-{seq}"

    # -- the events stream --

    def add_event(self, pid: str, fields: Mapping[str, str | int]) -> str:
        check_id(pid, "project id")
        with self._lock:
            entry_id = self._next_id()
            stream = self._events.setdefault(pid, [])
            stream.append((entry_id, _fields(fields)))
            del stream[:max(0, len(stream) - self.events_cap)]
            return entry_id

    def last_event_id(self, pid: str) -> str:
        with self._lock:
            stream = self._events.get(pid)
            return stream[-1][0] if stream else "0-0"

    def events_after(self, pid: str, cursor: str) -> EventsRead:
        with self._lock:
            stream = list(self._events.get(pid, []))
        trimmed = bool(stream) and later(stream[0][0], cursor)
        return EventsRead([e for e in stream if later(e[0], cursor)], trimmed)

    def append_timeline(self, pid: str, line: str) -> str:
        """One timeline record (a JSON line), as the ledger's sink appends it; its id."""
        with self._lock:
            entry_id = self._next_id()
            self._timeline.setdefault(check_id(pid, "project id"), []).append(
                (entry_id, {b"line": line.removesuffix("\n").encode()}))
            return entry_id

    def stream(self, handle: bytes) -> list[Entry]:
        """The entries of a stream MemoryFeed handed out a handle of (none: empty)."""
        kind, _, rest = handle.decode().partition(":")
        with self._lock:
            if kind == "events":
                return list(self._events.get(rest, []))
            if kind == "timeline":
                return list(self._timeline.get(rest, []))
            pid, unit, run = rest.split(":")
            return list(self._output.get((pid, unit, run), []))

    # -- test runs' output --

    def start_output(self, pid: str, unit: str, run_id: str, keep: int) -> None:
        check_id(unit, "unit id")
        check_id(run_id, "run id")
        with self._lock:
            runs = [r for r in self._runs.get((pid, unit), []) if r != run_id]
            runs.insert(0, run_id)
            for old in runs[keep:]:
                self._output.pop((pid, unit, old), None)
            self._runs[(pid, unit)] = runs[:keep]
            self._output.pop((pid, unit, run_id), None)
            self.add_event(pid, run_event("output", unit, run_id))

    def add_output(self, pid: str, unit: str, run_id: str, chunks: Mapping[str, str],
                   end: bool = False) -> None:
        check_id(unit, "unit id")
        check_id(run_id, "run id")
        with self._lock:
            stream = self._output.setdefault((pid, unit, run_id), [])
            for name, data in chunks.items():
                stream.append((self._next_id(), _fields({"s": name, "d": data})))
            if end:
                stream.append((self._next_id(), _fields({"end": "1"})))
                self.add_event(pid, run_event("output_end", unit, run_id))

    def latest_output_run(self, pid: str, unit: str) -> str | None:
        with self._lock:
            runs = self._runs.get((pid, unit))
            return runs[0] if runs else None

    def output_runs(self, pid: str, unit: str) -> list[str]:
        with self._lock:
            return list(self._runs.get((pid, unit), []))

    def read_output(self, pid: str, unit: str, run_id: str | None,
                    after: str = "0-0") -> OutputSoFar:
        if run_id is None:
            return OutputSoFar(None, [])
        with self._lock:
            stream = list(self._output.get((pid, unit, run_id), []))
        return output_so_far(run_id, [e for e in stream if later(e[0], after)], after)

    # -- what the live status reads; the writers are the few its tests need --

    def put_units(self, pid: str, units: Sequence[str]) -> None:
        """The project's units, in units.json order (what an import records)."""
        self._units[check_id(pid, "project id")] = [check_id(u, "unit id") for u in units]

    def unit_ids(self, pid: str) -> list[str]:
        if pid not in self._units:
            raise ProjectNotImported(f'project "{pid}" is not in the store; import it first')
        return list(self._units[pid])

    def put_state(self, pid: str, unit: str, state: UnitState, announce: bool = True) -> None:
        """Overwrite the unit's state and tell the events stream, as RedisStore.put_state;
        announce=False writes it behind the stream's back (as a direct SET would)."""
        with self._lock:
            self._states[(pid, check_id(unit, "unit id"))] = state.model_dump_json().encode()
            if announce:
                self.add_event(pid, state_event(unit, state))

    def put_step(self, pid: str, unit: str, name: str, record_json: str) -> None:
        """Keep a step's record (JSON) under its field name unless one is there already."""
        with self._lock:
            steps = self._steps.setdefault((pid, check_id(unit, "unit id")), {})
            steps.setdefault(name.encode(), record_json.encode())

    def unit_reads(self, pid: str, units: Sequence[str]) -> list[UnitRead]:
        with self._lock:
            return [UnitRead(self._states.get((pid, u)), dict(self._steps.get((pid, u), {})),
                             0, 0) for u in units]

    def shared_read(self, pid: str, leases: Sequence[tuple[str, int, str]],
                    moving: Sequence[str], run_file: str) -> SharedRead:
        """Nothing shared is kept here: no controls, spend or environment problem, no
        lease held (no step runs in a test of the live status)."""
        return SharedRead({}, {b"total": b"0", b"scripted": b"0"}, None, None, None)


class MemoryFeed:
    """LiveFeed's reads (store/livefeed.py) over a MemoryLive: the console's stream logic
    without a server. A blocked read looks again every poll_s."""

    def __init__(self, live: MemoryLive, poll_s: float = 0.01) -> None:
        self.live, self.poll_s = live, poll_s

    async def close(self) -> None:
        return None

    @staticmethod
    def events(pid: str) -> bytes:
        return f"events:{pid}".encode()

    @staticmethod
    def timeline(pid: str) -> bytes:
        return f"timeline:{pid}".encode()

    async def unit_timeline(self, pid: str, unit: str) -> bytes:
        return self.timeline(pid)  # never indexed by unit: its reader filters by unit

    @staticmethod
    def output(pid: str, unit: str, run_id: str) -> bytes:
        return f"output:{pid}:{check_id(unit, 'unit id')}:{check_id(run_id, 'run id')}".encode()

    async def read(self, streams: Mapping[bytes, str], block_ms: int = BLOCK_MS) -> Reply | None:
        deadline = time.monotonic() + block_ms / 1000
        while True:
            reply = [(handle, [e for e in self.live.stream(handle) if later(e[0], pos)][:BATCH])
                     for handle, pos in streams.items()]
            reply = [(handle, entries) for handle, entries in reply if entries]
            if reply:
                return reply
            if time.monotonic() >= deadline:
                return None
            await anyio.sleep(self.poll_s)

    async def trimmed_past(self, stream: bytes, last_id: str) -> bool:
        entries = self.live.stream(stream)
        return len(entries) >= self.live.events_cap and all(i != last_id for i, _ in entries)
