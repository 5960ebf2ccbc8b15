"""Per-step records in Redis: each step's result (for idempotent redelivery) and timings.

devloop:{pid}:unit:{unit}:steps     hash   "{role}:{attempt}:{try}" -> StepRecord (JSON)
devloop:{pid}:unit:{unit}:finished  set    dependencies of unit that have passed
devloop:{pid}:unit:{unit}:dispatched string set NX when unit is first released
devloop:{pid}:environment-error      string why no session can run (a worker found it)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from redis.client import Pipeline

from devloop.fleet.messages import StepMsg
from devloop.ledgers.sink import DirSink
from devloop.models import StepOutcome
from devloop.safedir import Dir
from devloop.store import Fence, RedisStore, UnitState, scripts
from devloop.store.fence import fenced

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
    store: RedisStore, msg: StepMsg
) -> tuple[UnitState, StepRecord | None, StepRecord | None]:
    """The unit's state and the stored coder and tester records of msg's attempt and try,
    in one round trip: what decide reads instead of the message."""
    keys = store.keys(msg.pid)
    with store.client.pipeline(transaction=False) as pipe:
        pipe.get(keys.state(msg.unit_id))
        pipe.hmget(
            steps_key(store, msg.pid, msg.unit_id),
            [field("coder", msg.attempt, 1), field("tester", msg.attempt, msg.tester_try)],
        )
        raw_state, (coder, tester) = pipe.execute()
    state = UnitState.model_validate_json(raw_state) if raw_state else UnitState()
    return state, _record(coder), _record(tester)


def _record(raw: bytes | None) -> StepRecord | None:
    return StepRecord.model_validate_json(raw) if raw else None


def steps_key(store: RedisStore, pid: str, unit: str) -> str:
    return f"{store.keys(pid).prefix}unit:{unit}:steps"


def finished_key(store: RedisStore, pid: str, unit: str) -> str:
    return f"{store.keys(pid).prefix}unit:{unit}:finished"


def dispatched_key(store: RedisStore, pid: str, unit: str) -> str:
    return f"{store.keys(pid).prefix}unit:{unit}:dispatched"


def environment_key(store: RedisStore, pid: str) -> str:
    """String: why no session can run on a worker's host (set by the worker that found it)."""
    return f"{store.keys(pid).prefix}environment-error"


def environment_error(store: RedisStore, pid: str) -> str | None:
    """The environment problem a worker reported for this project, if any."""
    raw = store.client.get(environment_key(store, pid))
    return raw.decode("utf-8", errors="replace") if raw else None


def field(role: str, attempt: int, tester_try: int) -> str:
    return f"{role}:{attempt}:{1 if role == 'coder' else tester_try}"


def load_step(
    store: RedisStore, pid: str, unit: str, role: str, attempt: int, tester_try: int
) -> StepRecord | None:
    """The stored record of a step, if it already ran to the end."""
    raw = store.client.hget(steps_key(store, pid, unit), field(role, attempt, tester_try))
    return StepRecord.model_validate_json(raw) if raw else None


# KEYS: lease, steps, state.  ARGV: owner, lease ttl_ms, step field, the attempt's coder
# field.  A step that ran to the end returns its record and takes no lease; any other
# takes it as the store's acquire_lease does (the same script, run inline: its KEYS[1]
# and ARGV[1..2] line up). The coder's record comes along: a tester step tests only
# what a coder step of its attempt finished.
BEGIN_STEP = f"""
local function acquire_lease()
{scripts.ACQUIRE_LEASE}
end
local record = redis.call('HGET', KEYS[2], ARGV[3])
local state = redis.call('GET', KEYS[3])
local coder = redis.call('HGET', KEYS[2], ARGV[4])
if record then
  return {{record, state or false, 0, coder or false}}
end
return {{false, state or false, acquire_lease(), coder or false}}
"""


@dataclass(frozen=True)
class StepStart:
    """What a delivered step finds: its record if it ran to the end, the unit's state, and
    whether it now holds the step's lease."""

    done: StepRecord | None
    state: UnitState
    leased: bool
    coder: StepRecord | None = None  # the coder record of the attempt


def begin_step(
    store: RedisStore, msg: StepMsg, role: str, lease_role: str, owner: str, ttl_s: float
) -> StepStart:
    """Look up the step and take its lease in one round trip (the next step waits on it)."""
    keys = [
        store.keys(msg.pid).lease(msg.unit_id, msg.attempt, lease_role),
        steps_key(store, msg.pid, msg.unit_id),
        store.keys(msg.pid).state(msg.unit_id),
    ]
    ttl_ms = max(1, round(ttl_s * 1000))
    args = [owner, ttl_ms, field(role, msg.attempt, msg.tester_try), field("coder", msg.attempt, 1)]
    record, state, leased, coder = store.client.register_script(BEGIN_STEP)(keys=keys, args=args)
    return StepStart(
        done=_record(record),
        state=UnitState.model_validate_json(state) if state else UnitState(),
        leased=bool(leased),
        coder=_record(coder),
    )


# KEYS: steps, lease.  ARGV: step field, record, owner.  The record of a step that still
# holds its lease, stored (unless one is there) and the lease given up in the same step.
SAVE_FENCED = (
    scripts.FENCE_CHECK.format(key=2, arg=3)
    + """
local created = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
local stored = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return {created, stored}
"""
)


def save_step(
    store: RedisStore,
    pid: str,
    unit: str,
    record: StepRecord,
    also: Callable[[Pipeline], object] = lambda pipe: None,
    fence: Fence | None = None,
) -> StepRecord:
    """Store a step's record unless one is there already; return the one that counts.

    `also` queues more commands into the same round trip. With `fence` (the step's lease)
    the record lands only while the step holds it (LeaseLost if not), and the lease is
    given up with it.
    """
    key = steps_key(store, pid, unit)
    name = field(record.role, record.attempt, record.tester_try)
    if fence is not None:
        with fenced(fence):
            created, stored = store.client.eval(
                SAVE_FENCED, 2, key, fence.lease, name, record.model_dump_json(), fence.owner
            )
        return record if created else StepRecord.model_validate_json(stored)
    with store.client.pipeline(transaction=False) as pipe:
        pipe.hsetnx(key, name, record.model_dump_json())
        pipe.hget(key, name)
        also(pipe)
        created, stored = pipe.execute()[:2]
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


def steps_of(store: RedisStore, pid: str, units: list[str]) -> dict[str, list[StepRecord]]:
    """Every step record of each listed unit, oldest first, in one round trip."""
    with store.client.pipeline(transaction=False) as pipe:
        for unit in units:
            pipe.hgetall(steps_key(store, pid, unit))
        replies = pipe.execute()
    return {
        unit: sorted(
            (StepRecord.model_validate_json(v) for v in raw.values()), key=lambda r: r.started_at
        )
        for unit, raw in zip(units, replies, strict=True)
    }
