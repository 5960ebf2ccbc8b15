"""Per-step records: each step's result (for idempotent redelivery) and timings.

The store keeps them as JSON under "{role}:{attempt}:{try}" (store/steps.py); this module
owns their model and what a step reads and writes of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from devloop.core.models import StepOutcome
from devloop.fleet.messages import StepMsg
from devloop.ledgers.sink import DirSink
from devloop.safe.safedir import Dir
from devloop.store import Fence, RedisStore, UnitState
from devloop.store.protocols import StepRecordStore

STEPS_FILE = "agent-state/fleet-steps.ndjson"


class StepRecord(BaseModel):
    """What one step produced and when: read back on redelivery, by status and reports."""

    model_config = ConfigDict(extra="forbid")

    role: str
    attempt: int
    tester_try: int = 1
    msg: StepMsg
    worker: str
    sent_at: float | None = None
    started_at: float
    ended_at: float
    tokens: int = 0
    cost_usd: float = 0.0
    status: str = ""
    output: dict[str, Any] = {}
    timings: dict[str, int] = {}  # materialize_ms, session_ms, commit_ms (coder and tester)
    outcome: StepOutcome | None = None  # coder and tester steps


def load_outcomes(
    store: StepRecordStore, msg: StepMsg
) -> tuple[UnitState, StepRecord | None, StepRecord | None]:
    """The unit's state and the stored coder and tester records of msg's attempt and try,
    in one round trip: what decide reads instead of the message."""
    names = [field("coder", msg.attempt, 1), field("tester", msg.attempt, msg.tester_try)]
    state, (coder, tester) = store.state_and_step_records(msg.pid, msg.unit_id, names)
    return state, _record(coder), _record(tester)


def _record(raw: bytes | None) -> StepRecord | None:
    return StepRecord.model_validate_json(raw) if raw else None


def environment_error(store: StepRecordStore, pid: str) -> str | None:
    """The environment problem a worker reported for this project, if any."""
    return store.environment_error(pid)


def field(role: str, attempt: int, tester_try: int) -> str:
    return f"{role}:{attempt}:{1 if role == 'coder' else tester_try}"


def load_step(
    store: StepRecordStore, pid: str, unit: str, role: str, attempt: int, tester_try: int
) -> StepRecord | None:
    """The stored record of a step, if it already ran to the end."""
    return _record(store.step_record(pid, unit, field(role, attempt, tester_try)))


@dataclass(frozen=True)
class StepStart:
    """What a delivered step finds: its record if it ran to the end, the unit's state, and
    whether it now holds the step's lease."""

    done: StepRecord | None
    state: UnitState
    leased: bool
    coder: StepRecord | None = None  # the coder record of the attempt


def begin_step(
    store: StepRecordStore, msg: StepMsg, role: str, lease_role: str, owner: str, ttl_s: float
) -> StepStart:
    """Look up the step and take its lease in one round trip (the next step waits on it)."""
    begun = store.begin_step(msg.pid, msg.unit_id, msg.attempt, lease_role, owner, ttl_s,
                             field(role, msg.attempt, msg.tester_try),
                             field("coder", msg.attempt, 1))
    return StepStart(done=_record(begun.record), state=begun.state, leased=begun.leased,
                     coder=_record(begun.coder))


def save_step(
    store: StepRecordStore,
    pid: str,
    unit: str,
    record: StepRecord,
    also: Callable[[Any], object] = lambda pipe: None,
    fence: Fence | None = None,
) -> StepRecord:
    """Store a step's record unless one is there already; return the one that counts.

    `also` queues more commands into the same round trip. With `fence` (the step's lease)
    the record lands only while the step holds it (LeaseLost if not), and the lease is
    given up with it.
    """
    name = field(record.role, record.attempt, record.tester_try)
    created, stored = store.save_step_record(pid, unit, name, record.model_dump_json(),
                                             fence=fence, also=also)
    return record if created else StepRecord.model_validate_json(stored)


def export_steps(store: RedisStore, pid: str, dest: Path) -> Path:
    """Write every unit's step records to agent-state/fleet-steps.ndjson (for reports)."""
    units = [entry.id for entry in store.project_record(pid).units.units]
    by_unit = steps_of(store, pid, units)
    return write_steps(dest, [record for records in by_unit.values() for record in records])


def write_steps(dest: Path, records: Iterable[StepRecord]) -> Path:
    """Write agent-state/fleet-steps.ndjson whole: one line per record."""
    lines = [record.model_dump_json() for record in records]
    dest.mkdir(parents=True, exist_ok=True)
    with Dir.open(dest) as root:  # never written through a link in the project folder
        root.write_atomic(STEPS_FILE, "".join(line + "\n" for line in lines))
    return dest / STEPS_FILE


def append_steps(dest: Path, records: Iterable[StepRecord]) -> Path:
    """Add records to agent-state/fleet-steps.ndjson (what a run does as steps end: the
    file grows with the steps, never written whole again; its end writes it whole)."""
    lines = [record.model_dump_json() for record in records]
    if lines:
        with Dir.open(dest) as root:  # never through a link in the project folder
            DirSink(root, STEPS_FILE).append("\n".join(lines))
    return dest / STEPS_FILE


def steps_of(
    store: StepRecordStore, pid: str, units: list[str]
) -> dict[str, list[StepRecord]]:
    """Every step record of each listed unit, oldest first, in one round trip."""
    return {
        unit: sorted((StepRecord.model_validate_json(v) for v in raw), key=lambda r: r.started_at)
        for unit, raw in store.step_records(pid, units).items()
    }
