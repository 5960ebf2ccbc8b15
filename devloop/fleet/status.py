"""A project's progress as rows: what `devloop status` and the live table show."""

from __future__ import annotations

import time

from pydantic import BaseModel

from devloop.fleet.control import read_control
from devloop.fleet.records import environment_error, steps_of
from devloop.store import RedisStore, UnitState

DONE = ("passed", "blocked", "blocked_upstream")


class UnitRow(BaseModel):
    """One unit's line in the status table."""

    unit_id: str
    status: str
    attempt: int
    tokens: int
    cost_usd: float
    elapsed_s: float
    last_hint: str | None = None
    last_error: str | None = None  # the model's error while waiting_model, a step's exception
    blocked_reason: str | None = None
    note: str | None = None  # why the unit waits that is not its code's fault (a busy machine)


class ProjectStatus(BaseModel):
    """Every unit's row, and whether the run is over."""

    pid: str
    units: list[UnitRow]
    environment_error: str | None = None  # no session can run: the run stops with this
    paused: str | None = None  # "budget" or "cancelled": no new session starts until resumed
    spent_usd: float = 0.0  # the project's model spend, every session counted as it ran
    max_usd: float | None = None  # the project's cap (devloop run --max-usd)

    @property
    def finished(self) -> bool:
        return all(u.status in DONE for u in self.units)

    @property
    def all_passed(self) -> bool:
        return all(u.status == "passed" for u in self.units)

    def count(self, status: str) -> int:
        return sum(u.status == status for u in self.units)


def load_note(state: UnitState) -> str | None:
    """A unit held up by a busy machine says so: its starved test runs, re-run later."""
    starved = int(state.extra.get("starved_reruns", 0))
    if starved and state.status == "testing":
        return f"test run starved of CPU {starved}x: re-run after a backoff"
    return None


def project_status(store: RedisStore, pid: str, now: float | None = None) -> ProjectStatus:
    """Rows in units.json order, tokens and cost summed over every finished step."""
    now = now or time.time()
    rows = []
    units = [entry.id for entry in store.project_record(pid).units.units]
    states, steps_by_unit = store.get_states(pid, units), steps_of(store, pid, units)
    for unit in units:
        state, steps = states[unit], steps_by_unit[unit]
        end = max((s.ended_at for s in steps), default=now) if state.status in DONE else now
        rows.append(
            UnitRow(
                unit_id=unit,
                status=state.status,
                attempt=state.attempt,
                tokens=sum(s.tokens for s in steps),
                cost_usd=round(sum(s.cost_usd for s in steps), 4),
                elapsed_s=round(end - state.started_at, 1) if state.started_at else 0.0,
                last_hint=state.last_hint,
                last_error=state.last_error,
                blocked_reason=state.blocked_reason if state.status == "blocked" else None,
                note=load_note(state),
            )
        )
    control = read_control(store, pid)
    return ProjectStatus(
        pid=pid, units=rows, environment_error=environment_error(store, pid),
        paused=control.paused, spent_usd=round(control.spent_usd, 6), max_usd=control.max_usd,
    )
