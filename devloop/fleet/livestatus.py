"""A project's status kept in memory during a run, moved on by its events stream.

`devloop run` reads the whole project once (`load`); each later look (`poll`) reads only
what moved: the units the events stream named since the last look (every state write is
an event, and a step's records, files and cost land before its state moves), the units a
step runs for now (their time, step and cost move without an event), and a slice of the
rest in turn, so anything no event announced still shows within `sweep_s` (a consistency
check: one cycle of slices reads every unit once). When the stream was trimmed past the
last look (more than its cap of events in between), the next look reads everything again.
A look's cost grows with what changed and with the units running, not with the project.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

from devloop.core.money import from_nano
from devloop.fleet.control import Control, control_from
from devloop.fleet.records import StepRecord
from devloop.fleet.status import (
    MOVING,
    RUN_FILE,
    ProjectStatus,
    Setting,
    StepProgress,
    UnitRow,
    scripted_runs,
    status_of,
    step_leases,
    unit_row,
)
from devloop.store import UnitState
from devloop.store.protocols_live import LiveStatusStore
from devloop.store.state import event_states

SWEEP_S = 60.0  # every unit is read again at least this often, events or not
RECENT = 256  # units remembered as the last to change (the live view shows them first)


@dataclass
class UnitInputs:
    """What a unit's row is made of, as last read (raw too, so a change is cheap to tell)."""

    raw_state: bytes | None = None
    raw_steps: dict[bytes, bytes] = field(default_factory=dict)
    records: dict[bytes, StepRecord] = field(default_factory=dict)  # raw_steps parsed
    state: UnitState = field(default_factory=UnitState)
    steps: list[StepRecord] = field(default_factory=list)
    version: int = 0  # its files' version
    spent_nano: int = 0  # its share of the spend ledger


@dataclass(frozen=True)
class Look:
    """What one look found: the status, whether anything shown changed, the units whose
    state, records or files changed, and the step records not seen before."""

    status: ProjectStatus
    changed: bool
    units: list[str]
    steps: list[StepRecord]


class LiveStatus:
    """The project's status in memory, moved on by its events (see the module doc)."""

    def __init__(self, store: LiveStatusStore, pid: str, folder: str | None = None,
                 sweep_s: float = SWEEP_S) -> None:
        self.store, self.pid, self.folder, self.sweep_s = store, pid, folder, sweep_s
        self.units: list[str] = []
        self.index: dict[str, int] = {}
        self.inputs: dict[str, UnitInputs] = {}
        self.rows: list[UnitRow] = []
        self.moving: set[str] = set()  # units in a MOVING status: rows read each look
        self.stale: set[str] = set()  # units read changed whose rows are not built yet
        self.recent: deque[str] = deque(maxlen=RECENT)
        self.cursor = "0-0"  # the last events entry read
        self.sweep_at = 0  # the next unit the consistency sweep reads
        self.looked_at = 0.0
        self.setting: Setting | None = None
        self.status: ProjectStatus | None = None

    @property
    def versions(self) -> dict[str, int]:
        """Each unit's files' version, as last read."""
        return {unit: inputs.version for unit, inputs in self.inputs.items()}

    def load(self) -> Look:
        """Read the whole project (the start)."""
        self.cursor = self.store.last_event_id(self.pid)
        self.units = self.store.unit_ids(self.pid)
        self.index = {unit: i for i, unit in enumerate(self.units)}
        self.inputs, self.moving, self.stale, self.setting = {}, set(), set(), None
        self.rows = [UnitRow(unit_id=u, status="pending", attempt=0, tokens=0, cost_usd=0.0,
                             elapsed_s=0.0) for u in self.units]
        changed, steps = self._read_units(self.units)
        look = self._look(changed, steps, loading=True)
        return Look(look.status, True, look.units, look.steps)

    def poll(self) -> Look:
        """Look again: the units the events named, the running ones and a sweep slice."""
        named, trimmed, cursor = self._events()
        now = time.time()
        share = (now - self.looked_at) / self.sweep_s if self.looked_at else 0.0
        count = min(len(self.units), max(1, math.ceil(len(self.units) * share)))
        if trimmed:  # what the lost events said is not known: every unit is read again
            count = len(self.units)
        start = self.sweep_at
        swept = [self.units[(start + i) % len(self.units)] for i in range(count)]
        changed, steps = self._read_units(list(dict.fromkeys([*named, *swept])))
        look = self._look(changed, steps)
        # Moved on only once the look is whole: a look cut short (Redis went away) is
        # taken again from the same place.
        self.cursor, self.sweep_at = cursor, (start + count) % max(1, len(self.units))
        return look

    def _events(self) -> tuple[list[str], bool, str]:
        """The units the events since the last look name, whether some events were
        trimmed before they were read, and the position after them."""
        read = self.store.events_after(self.pid, self.cursor)
        named: list[str] = []
        cursor = self.cursor
        for entry_id, fields in read.entries:
            cursor = entry_id
            # A state write names its unit; a cascade names a batch of them.
            named.extend(unit for unit, _status, _attempt in event_states(fields))
        return [u for u in dict.fromkeys(named) if u in self.index], read.trimmed, cursor

    def _read_units(self, units: list[str]) -> tuple[list[str], list[StepRecord]]:
        """Read each unit's state, step records, files' version and spend; the units that
        changed, and the step records not seen before (oldest first)."""
        changed: list[str] = []
        new_steps: list[StepRecord] = []
        for unit, read in zip(units, self.store.unit_reads(self.pid, units), strict=True):
            raw_state, raw_steps = read.raw_state, read.raw_steps
            old = self.inputs.get(unit)
            if old is None:
                old = self.inputs[unit] = UnitInputs(raw_state=b"")  # never equal
            moved = (raw_state != old.raw_state or raw_steps != old.raw_steps
                     or read.version != old.version or read.spent_nano != old.spent_nano)
            if not moved:
                continue
            if raw_steps != old.raw_steps:
                records = {k: old.records[k] if old.raw_steps.get(k) == v
                           else StepRecord.model_validate_json(v)
                           for k, v in raw_steps.items()}
                new_steps += [r for k, r in records.items() if k not in old.raw_steps]
                old.records, old.raw_steps = records, raw_steps
                old.steps = sorted(records.values(), key=lambda r: r.started_at)
            if raw_state != old.raw_state:
                old.state = (UnitState.model_validate_json(raw_state) if raw_state
                             else UnitState())
                old.raw_state = raw_state
            old.version, old.spent_nano = read.version, read.spent_nano
            changed.append(unit)
        self.stale.update(changed)  # their rows are built again by the next whole look
        return changed, sorted(new_steps, key=lambda r: r.started_at)

    def _look(self, changed: list[str], steps: list[StepRecord], loading: bool = False) -> Look:
        """Read what every row shares and what moves for running units; build again the
        rows that may read differently now."""
        moving = sorted(self.moving | {u for u in self.stale
                                       if self.inputs[u].state.status in MOVING})
        control, environment, every_run_scripted, live, progress, spent = self._shared(moving)
        now = time.time()
        self.looked_at = now
        setting = Setting(self.pid, control, every_run_scripted, folder=self.folder, now=now)
        redo = self.stale | set(moving)
        if self.setting is None or not setting.same_rows(self.setting):
            redo = set(self.units)
        shown = False
        for unit in sorted(redo, key=self.index.__getitem__):
            inputs = self.inputs[unit]
            if unit in spent:
                inputs.spent_nano = spent[unit]
            row = unit_row(unit, inputs.state, inputs.steps, setting, unit in live,
                           progress.get(unit), from_nano(inputs.spent_nano))
            i = self.index[unit]
            before = self.rows[i]
            if row != before:
                shown = True
                if row.status != before.status and not loading:
                    self.recent.appendleft(unit)
                self.rows[i] = row
            if inputs.state.status in MOVING:
                self.moving.add(unit)
            else:
                self.moving.discard(unit)
        self.stale = set()
        status = status_of(setting, list(self.rows), environment, list(self.recent))
        previous = self.status
        shown = shown or previous is None or _figures(previous) != _figures(status)
        self.setting, self.status = setting, status
        return Look(status, shown, changed, steps)

    def _shared(self, moving: list[str]) -> tuple[
        Control, str | None, bool, set[str], dict[str, StepProgress], dict[str, int]
    ]:
        """In one round trip: the controls, the environment's problem, whether every run
        was scripted, and for each moving unit whether a step holds its lease, its last
        progress record and its spend."""
        leases = [lease for unit in moving for lease in step_leases(unit, self.inputs[unit].state)]
        read = self.store.shared_read(self.pid, leases, moving, RUN_FILE)
        control = control_from(read.control, read.spend, read.earlier)
        progress = {unit: StepProgress.model_validate_json(v) for unit, v in read.progress.items()}
        env = (read.environment.decode("utf-8", errors="replace") if read.environment
               else None)
        return control, env, scripted_runs(read.run_json), read.held, progress, read.spent


def _figures(status: ProjectStatus) -> tuple[object, ...]:
    """What the live view shows of the project beyond its rows."""
    return (status.environment_error, status.scripted, status.paused, round(status.spent_usd, 4),
            status.max_usd, status.default_max_usd)
