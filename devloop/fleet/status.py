"""A project's progress as rows: what `devloop status` and the live table show.

The store keeps each running session's last step (StepProgress JSON, store/steps.py).
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass

from pydantic import BaseModel, Field

from devloop.core.loop import awaited_tester_try
from devloop.core.models import CodeCoverage
from devloop.core.money import resume_cap
from devloop.fleet.control import Control, read_control
from devloop.fleet.marks import is_scripted, note_llm
from devloop.fleet.records import StepRecord, environment_error, steps_of
from devloop.fleet.why import next_steps, reason, rerun_green
from devloop.store import RedisStore, UnitState
from devloop.store.protocols import StepRecordStore

DONE = ("passed", "blocked", "blocked_upstream")
MOVING = ("coding", "testing", "waiting_model")  # a worker owes these a step
RUN_FILE = "run.json"  # agent-state/run.json: which models the runs of the folder used


class StepProgress(BaseModel):
    """What the running session of a unit last reported (its worker writes it)."""

    role: str
    attempt: int
    since: float  # when the step started
    step: int | None = None
    total: int | None = None
    turn: int | None = None
    tool: str | None = None  # the last tool called

    def describe(self) -> str:
        """`coder 2/4, turn 3, Write`."""
        parts = [self.role + (f" {self.step}/{self.total}" if self.total else "")]
        if self.turn:
            parts.append(f"turn {self.turn}")
        if self.tool:
            parts.append(self.tool)
        return ", ".join(parts)


class UnitRow(BaseModel):
    """One unit's line in the status table."""

    unit_id: str
    status: str  # the loop's status, or `interrupted` when nothing runs the unit any more
    attempt: int
    tokens: int
    cost_usd: float  # the unit's share of the project's spend ledger (every model call)
    elapsed_s: float  # time a step of the unit was live (queue waits and dead runs are not)
    last_hint: str | None = None
    last_error: str | None = None  # the model's error while waiting_model, a step's exception
    blocked_reason: str | None = None
    reason: str | None = None  # why it is blocked, waits or stands still, in words
    step: str | None = None  # the running session's current step (role, step/total, turn, tool)
    next_steps: list[str] = []  # blocked: the commands that move it on
    # why the unit waits that is not its code's fault (a busy machine); for a green by a
    # zero-token re-run, which attempt's code the tests ran on (no tester session)
    note: str | None = None
    coverage: CodeCoverage | None = None  # line and branch coverage by its last tester run
    scripted: bool = False  # passed under the stub's scripted turns: a real model runs it again

    @property
    def label(self) -> str:
        """The status as a person reads it: `passed (scripted)` for a scripted pass."""
        return f"{self.status} (scripted)" if self.scripted else self.status


class ProjectStatus(BaseModel):
    """Every unit's row, and whether the run is over."""

    pid: str
    units: list[UnitRow]
    environment_error: str | None = None  # no session can run: the run stops with this
    scripted: bool = False  # the costs are a stub's scripted turns priced, not money spent
    paused: str | None = None  # "budget" or "cancelled": no new session starts until resumed
    spent_usd: float = 0.0  # the project's model spend, every model call counted as it ran
    max_usd: float | None = None  # a person's cap (devloop run --max-usd)
    default_max_usd: float | None = None  # DevLoop's cap, standing when no person gave one
    real_spent_usd: float = 0.0  # the spend but scripted turns': what the default counts
    # The folder the commands shown name (else the project id); not part of the JSON.
    folder: str | None = Field(default=None, exclude=True)
    # The units whose rows changed last, newest first (the live view shows them); not JSON.
    recent: list[str] = Field(default_factory=list, exclude=True)

    @property
    def finished(self) -> bool:
        return all(u.status in DONE for u in self.units)

    @property
    def all_passed(self) -> bool:
        return all(u.status == "passed" for u in self.units)

    def count(self, status: str) -> int:
        return sum(u.status == status for u in self.units)


# Statuses a green test run put the unit in (its note may say how the green was reached).
GREEN = ("passed", "review")


def load_note(state: UnitState) -> str | None:
    """A unit held up by a busy machine says so: its starved test runs, re-run later."""
    starved = int(state.extra.get("starved_reruns", 0))
    if starved and state.status == "testing":
        return f"test run starved of CPU {starved}x: re-run after a backoff"
    return None


def last_coverage(steps: list[StepRecord]) -> CodeCoverage | None:
    """The coverage of code/ by the unit's last tester step (None: it measured none)."""
    testers = [s for s in steps if s.role == "tester"]
    raw = testers[-1].output.get("coverage") if testers else None
    try:
        return CodeCoverage.model_validate(raw) if raw else None
    except ValueError:
        return None


def record_progress(
    store: StepRecordStore, pid: str, unit: str, progress: StepProgress
) -> None:
    """Keep the unit's running session's last step, for the live table and `status`."""
    store.record_progress(pid, unit, progress.model_dump_json())


def mark_run(store: RedisStore, pid: str, llm: str) -> None:
    """Note which model this run uses (agent-state/run.json): stub costs are labelled, and
    the decisions it makes are marked scripted or not."""
    note_llm(store, pid, llm)
    raw = store.agent_state_file(pid, RUN_FILE)
    seen = json.loads(raw).get("llms", []) if raw else []
    llms = sorted({*seen, llm})
    store.put_agent_state(pid, RUN_FILE, json.dumps({"llms": llms}).encode())


def scripted(store: RedisStore, pid: str) -> bool:
    """Whether every run of the project so far used the stub's scripted turns."""
    return scripted_runs(store.agent_state_file(pid, RUN_FILE))


def scripted_runs(run_json: bytes | None) -> bool:
    """Whether agent-state/run.json (as stored) says every run so far used the stub."""
    return bool(run_json) and json.loads(run_json or b"{}").get("llms") == ["stub"]


def step_leases(unit: str, state: UnitState) -> list[tuple[str, int, str]]:
    """The (unit, attempt, role) leases a step of the unit's current attempt holds while it
    runs."""
    roles = ["coder", *(f"tester.{n}" for n in range(1, awaited_tester_try(state) + 1))]
    return [(unit, state.attempt, role) for role in roles]


def _live_units(store: StepRecordStore, pid: str, states: dict[str, UnitState]) -> set[str]:
    """Units a step runs for right now: one of their current attempt's leases is held."""
    asked = [lease for unit, state in states.items() if state.status in MOVING
             for lease in step_leases(unit, state)]
    held = store.lease_owners(pid, asked)
    return {unit for (unit, _, _), owner in zip(asked, held, strict=True) if owner}


def _progress(
    store: RedisStore, pid: str, states: dict[str, UnitState]
) -> dict[str, StepProgress]:
    """The last progress record of each moving unit (the others' are not shown)."""
    moving = [unit for unit, state in states.items() if state.status in MOVING]
    return {unit: StepProgress.model_validate_json(v)
            for unit, v in store.progress_of(pid, moving).items()}


def _current(progress: StepProgress | None, state: UnitState) -> StepProgress | None:
    """The progress record when it is the running step's (same attempt and role)."""
    role = "coder" if state.status == "coding" else "tester"
    if progress is None or progress.attempt != state.attempt or progress.role != role:
        return None
    return progress


def _elapsed(steps: list[StepRecord], live_since: float | None, now: float) -> float:
    """Seconds a step of the unit ran: its finished steps, and the live one so far."""
    busy = sum(max(0.0, s.ended_at - s.started_at) for s in steps)
    return round(busy + (max(0.0, now - live_since) if live_since else 0.0), 1)


@dataclass(frozen=True)
class Setting:
    """What every row of a project shares: its controls, the commands shown, the time."""

    pid: str
    control: Control
    every_run_scripted: bool
    fleet: bool | None = True
    folder: str | None = None
    run_live: str | None = None
    now: float = 0.0

    @property
    def resume(self) -> str:
        """The command that carries a paused project on."""
        control = self.control
        resume = f"devloop resume {shlex.quote(self.folder) if self.folder else self.pid}"
        if control.paused == "budget":
            resume += " --max-usd " + resume_cap(control.spent_usd, control.max_usd,
                                                 control.real_spent_usd,
                                                 control.default_max_usd)
        return resume

    def same_rows(self, other: Setting) -> bool:
        """Whether rows built in `other` read as in this one (time and spend aside)."""
        return (self.control.paused, self.resume, self.every_run_scripted) == (
            other.control.paused, other.resume, other.every_run_scripted)


def unit_row(
    unit: str,
    state: UnitState,
    steps: list[StepRecord],
    setting: Setting,
    live: bool,
    progress: StepProgress | None,
    spent_usd: float,
) -> UnitRow:
    """One unit's row from what Redis holds of it (`live`: a step of it holds its lease)."""
    paused = setting.control.paused
    shown: str = state.status
    if shown in MOVING and not live and (setting.fleet is False or paused):
        shown = "paused" if paused else "interrupted"
    current = _current(progress, state) if live else None
    since = (current.since if current else state.updated_at) if live else None
    return UnitRow(
        unit_id=unit,
        status=shown,
        attempt=state.attempt,
        tokens=sum(s.tokens for s in steps),
        cost_usd=spent_usd,
        elapsed_s=_elapsed(steps, since, setting.now),
        last_hint=state.last_hint,
        last_error=state.last_error,
        blocked_reason=state.blocked_reason if state.status == "blocked" else None,
        reason=reason(state, steps, shown, paused, setting.resume),
        step=current.describe() if current else None,
        next_steps=(next_steps(state, unit, setting.folder, setting.pid, setting.run_live)
                    if shown == "blocked" else []),
        note=load_note(state) or (
            rerun_green(steps, state.attempt) if state.status in GREEN else None
        ),
        coverage=last_coverage(steps),
        scripted=is_scripted(state, setting.every_run_scripted),
    )


def status_of(
    setting: Setting, rows: list[UnitRow], environment: str | None,
    recent: list[str] | None = None,
) -> ProjectStatus:
    """The project's status from its rows and its controls."""
    control = setting.control
    return ProjectStatus(
        pid=setting.pid, units=rows, environment_error=environment,
        scripted=setting.every_run_scripted, paused=control.paused,
        spent_usd=control.spent_usd, max_usd=control.max_usd, folder=setting.folder,
        default_max_usd=control.default_max_usd if control.max_usd is None else None,
        real_spent_usd=control.real_spent_usd, recent=recent or [],
    )


def project_status(
    store: RedisStore,
    pid: str,
    now: float | None = None,
    fleet: bool | None = True,
    folder: str | None = None,
    run_live: str | None = None,
) -> ProjectStatus:
    """Rows in units.json order: tokens summed over every finished step, each unit's cost
    its share of the spend ledger (the project's total is the ledger's).

    fleet says whether workers consume the project's queues: when it is False, a unit that
    should be moving but has no live step shows as `interrupted` (or `paused`, when a pause
    of the project stopped it). A blocked unit's row names the commands that move it on, for
    the project at `folder` (when known), with the pid of the `devloop run` live on that
    folder (`run_live`), which then picks the unit up. Every read is one pipelined round
    trip (or a few, for a large project): the cost grows with the units, no faster.
    """
    units = [entry.id for entry in store.project_record(pid).units.units]
    states, steps_by_unit = store.get_states(pid, units), steps_of(store, pid, units)
    live, progress = _live_units(store, pid, states), _progress(store, pid, states)
    setting = Setting(pid, read_control(store, pid), scripted(store, pid), fleet, folder,
                      run_live, now or time.time())
    rows = [unit_row(unit, states[unit], steps_by_unit[unit], setting, unit in live,
                     progress.get(unit), setting.control.unit_spent.get(unit, 0.0))
            for unit in units]
    return status_of(setting, rows, environment_error(store, pid))


def unit_rows(
    store: RedisStore,
    pid: str,
    units: list[str],
    control: Control | None = None,
    *,
    now: float | None = None,
    fleet: bool | None = True,
    folder: str | None = None,
    run_live: str | None = None,
    every_run_scripted: bool | None = None,
) -> list[UnitRow]:
    """The rows of the listed units as project_status has them, reading only their keys
    (and the project's few): the console's unit page and its per-change updates."""
    control = control if control is not None else read_control(store, pid, units)
    states, steps_by_unit = store.get_states(pid, units), steps_of(store, pid, units)
    live, progress = _live_units(store, pid, states), _progress(store, pid, states)
    if every_run_scripted is None:
        every_run_scripted = scripted(store, pid)
    setting = Setting(pid, control, every_run_scripted, fleet, folder, run_live,
                      now or time.time())
    return [unit_row(unit, states[unit], steps_by_unit[unit], setting, unit in live,
                     progress.get(unit), control.unit_spent.get(unit, 0.0))
            for unit in units]
