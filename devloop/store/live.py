"""The live side's reads: the events stream, the newest timeline entries, and what the
live status reads of each unit and of the project in one round trip.

Events are appended by the state writes themselves (store/state.py), by the controls and
by a run's output (store/output.py); `add_event` is for any other kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from redis.commands.core import Script

from devloop.store.base import decode_hash
from devloop.store.keys import EVENTS_MAXLEN, pid_of_record, project_record_pattern
from devloop.store.project import ProjectMixin

Entry = tuple[str, dict[bytes, bytes]]  # a stream entry: its id and its fields
LIVE_BATCH = 1000  # units per pipeline of unit_reads

# KEYS: the project hash.  The SHA-1 of units_json, or false when it was never imported.
_DIGEST = """
local units = redis.call('HGET', KEYS[1], 'units_json')
if not units then return false end
return redis.sha1hex(units)
"""


@dataclass(frozen=True)
class EventsRead:
    """The events after a position, and whether some were trimmed before they were read."""

    entries: list[Entry]
    trimmed: bool


@dataclass(frozen=True)
class UnitRead:
    """A unit's inputs as stored: its state (JSON), step records (raw hash), its files'
    version and its share of the spend ledger (nano-dollars)."""

    raw_state: bytes | None
    raw_steps: dict[bytes, bytes]
    version: int
    spent_nano: int


@dataclass(frozen=True)
class SharedRead:
    """What every row shares, and what moves for running units, as stored."""

    control: dict[bytes, bytes]
    spend: dict[bytes, bytes]  # total and scripted (nano-dollars)
    earlier: bytes | None  # the float total an earlier DevLoop kept
    environment: bytes | None
    run_json: bytes | None  # agent-state/run.json
    held: set[str] = field(default_factory=set)  # units one of whose asked leases is held
    progress: dict[str, bytes] = field(default_factory=dict)  # unit -> StepProgress JSON
    spent: dict[str, int] = field(default_factory=dict)  # moving unit -> its nano-dollars


def after(entry: str, cursor: str) -> bool:
    """Whether stream id `entry` comes after `cursor` (ids are `ms-seq`)."""
    a, _, b = entry.partition("-")
    c, _, d = cursor.partition("-")
    return (int(a), int(b or 0)) > (int(c), int(d or 0))


def _last(entries: list[Any]) -> str:
    return entries[0][0].decode() if entries else "0-0"


def _entries(raw: list[Any]) -> list[Entry]:
    return [(i.decode(), fields) for i, fields in raw]


class LiveMixin(ProjectMixin):
    """`add_event`, `events_after`, `last_event_id`, the timeline's newest entries,
    `unit_reads` and `shared_read` (the live status's round trips), `project_ids`."""

    def add_event(self, pid: str, fields: Mapping[str, str | int]) -> str:
        """Append one live event (the stream kept to about EVENTS_MAXLEN); its id."""
        entry = self.client.xadd(self.keys(pid).events, dict(fields),
                                 maxlen=EVENTS_MAXLEN, approximate=True)
        return entry.decode() if isinstance(entry, bytes) else str(entry)

    def last_event_id(self, pid: str) -> str:
        """The id of the newest events entry ("0-0" when there is none)."""
        return _last(self.client.xrevrange(self.keys(pid).events, count=1))

    def events_after(self, pid: str, cursor: str) -> EventsRead:
        """Every events entry after cursor, and whether entries after it were trimmed
        before this read (the oldest entry kept is newer than the cursor)."""
        key = self.keys(pid).events
        with self.client.pipeline(transaction=False) as pipe:
            pipe.xread({key: cursor})
            pipe.xrange(key, count=1)
            reply, first = pipe.execute()
        trimmed = bool(first) and after(first[0][0].decode(), cursor)
        return EventsRead([e for _key, entries in reply or [] for e in _entries(entries)],
                          trimmed)

    def newest_ids(self, pid: str) -> tuple[str, str]:
        """The newest entry id of the events stream and of the timeline ledger."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.xrevrange(keys.events, count=1)
            pipe.xrevrange(keys.stream("timeline"), count=1)
            events, timeline = pipe.execute()
        return _last(events), _last(timeline)

    def timeline_before(self, pid: str, upto: str, count: int) -> list[Entry]:
        """The newest `count` timeline entries up to the entry upto, newest first."""
        raw = self.client.xrevrange(self.keys(pid).stream("timeline"), max=upto, count=count)
        return _entries(raw)

    def unit_reads(self, pid: str, units: Sequence[str]) -> list[UnitRead]:
        """Each unit's state, step records, files' version and spend, LIVE_BATCH units a
        round trip."""
        keys = self.keys(pid)
        out: list[UnitRead] = []
        for start in range(0, len(units), LIVE_BATCH):
            batch = units[start:start + LIVE_BATCH]
            with self.client.pipeline(transaction=False) as pipe:
                for unit in batch:
                    pipe.get(keys.state(unit))
                    pipe.hgetall(keys.steps(unit))
                    pipe.hget(keys.meta(unit), "version")
                    pipe.hget(keys.spend, f"unit:{unit}")
                replies = pipe.execute()
            for i in range(len(batch)):
                raw_state, raw_steps, version, spent = replies[4 * i: 4 * i + 4]
                out.append(UnitRead(raw_state, raw_steps, int(version or 0), int(spent or 0)))
        return out

    def shared_read(self, pid: str, leases: Sequence[tuple[str, int, str]],
                    moving: Sequence[str], run_file: str) -> SharedRead:
        """In one round trip: the controls, the spend ledger's totals, the environment's
        problem, agent-state/`run_file`, which units hold one of the asked leases
        (unit, attempt, role), and each moving unit's last progress and spend."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.control)
            pipe.hmget(keys.spend, ["total", "scripted"])
            pipe.get(keys.spent)
            pipe.get(keys.environment_error)
            pipe.hget(keys.agent_state, run_file)
            if leases:
                pipe.mget([keys.lease(u, attempt, role) for u, attempt, role in leases])
            if moving:
                pipe.hmget(keys.progress, list(moving))
                pipe.hmget(keys.spend, [f"unit:{u}" for u in moving])
            replies = pipe.execute()
        control, (total, scripted), earlier, environment, run = replies[:5]
        shared = SharedRead(control, {b"total": total or b"0", b"scripted": scripted or b"0"},
                            earlier, environment, run)
        rest = replies[5:]
        if leases:
            held = rest.pop(0)
            shared.held.update(u for (u, _, _), owner in zip(leases, held, strict=True) if owner)
        if moving:
            progress, spent = rest
            shared.progress.update((u, v) for u, v in zip(moving, progress, strict=True) if v)
            shared.spent.update((u, int(v or 0)) for u, v in zip(moving, spent, strict=True))
        return shared

    def unit_ids(self, pid: str) -> list[str]:
        """The project's units, in units.json order (ProjectNotImported when it is not)."""
        return [u.id for u in self.project_record(pid).units.units]

    def project_ids(self) -> list[str]:
        """Every project imported into this Redis."""
        found = (pid_of_record(k.decode(errors="replace"))
                 for k in self.client.scan_iter(match=project_record_pattern(), count=500))
        return sorted(pid for pid in found if pid)

    def project_digest(self, pid: str) -> str | None:
        """The SHA-1 of the project's stored units.json (None: not imported), computed by
        the server so the 1 MB document is not fetched to learn it did not change."""
        raw = self._project_digest(keys=[self.keys(pid).project])
        return raw.decode() if isinstance(raw, bytes) else raw

    @cached_property
    def _project_digest(self) -> Script:
        return self.client.register_script(_DIGEST)

    def project_fields(self, pid: str) -> dict[str, bytes]:
        """The project record's hash, as stored (record_from reads it)."""
        return decode_hash(self.client.hgetall(self.keys(pid).project))
