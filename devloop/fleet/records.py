"""Per-step records in Redis: each step's result (for idempotent redelivery) and timings.

devloop:{pid}:unit:{unit}:steps     hash   "{role}:{attempt}:{try}" -> StepRecord (JSON)
devloop:{pid}:unit:{unit}:finished  set    dependencies of unit that have passed
devloop:{pid}:unit:{unit}:dispatched string set NX when unit is first released
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from devloop.fleet.messages import StepMsg
from devloop.store import RedisStore

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


def steps_key(store: RedisStore, pid: str, unit: str) -> str:
    return f"{store.keys(pid).prefix}unit:{unit}:steps"


def finished_key(store: RedisStore, pid: str, unit: str) -> str:
    return f"{store.keys(pid).prefix}unit:{unit}:finished"


def dispatched_key(store: RedisStore, pid: str, unit: str) -> str:
    return f"{store.keys(pid).prefix}unit:{unit}:dispatched"


def field(role: str, attempt: int, tester_try: int) -> str:
    return f"{role}:{attempt}:{1 if role == 'coder' else tester_try}"


def load_step(
    store: RedisStore, pid: str, unit: str, role: str, attempt: int, tester_try: int
) -> StepRecord | None:
    """The stored record of a step, if it already ran to the end."""
    raw = store.client.hget(steps_key(store, pid, unit), field(role, attempt, tester_try))
    return StepRecord.model_validate_json(raw) if raw else None


def save_step(store: RedisStore, pid: str, unit: str, record: StepRecord) -> StepRecord:
    """Store a step's record unless one is there already; return the one that counts."""
    key = steps_key(store, pid, unit)
    name = field(record.role, record.attempt, record.tester_try)
    if store.client.hsetnx(key, name, record.model_dump_json()):
        return record
    existing = store.client.hget(key, name)
    assert existing is not None
    return StepRecord.model_validate_json(existing)


def export_steps(store: RedisStore, pid: str, dest: Path) -> Path:
    """Write every unit's step records to agent-state/fleet-steps.ndjson (for reports)."""
    lines = [
        record.model_dump_json()
        for entry in store.project_record(pid).units.units
        for record in all_steps(store, pid, entry.id)
    ]
    path = dest / STEPS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    os.replace(tmp, path)
    return path


def all_steps(store: RedisStore, pid: str, unit: str) -> list[StepRecord]:
    """Every step record of a unit, oldest first."""
    raw = store.client.hgetall(steps_key(store, pid, unit))
    records = [StepRecord.model_validate_json(v) for v in raw.values()]
    return sorted(records, key=lambda r: r.started_at)
