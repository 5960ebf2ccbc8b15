"""What a project page shows live, kept in memory and updated per change: each unit's dot
(status, attempts, scripted, tokens), the counts, who needs a person, the controls.

Loaded whole once (`Summary.load`), then each batch of changes re-reads only the units it
names (`Summary.read`, in a worker thread) and applies the result (`Summary.apply`, in the
event loop), so an update costs what changed, not the project.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from devloop.console.shape import Shape
from devloop.fleet.control import Control, read_control
from devloop.fleet.human import HUMAN, HumanCall, human_calls, needs_human
from devloop.fleet.status import MOVING, UnitRow, project_status, unit_rows
from devloop.store import RedisStore

MAX_CALLS = 100  # calls a page lists (the rest are counted): a page stays bounded
STOPPED = ("paused", "interrupted")  # a moving unit shown as stopped by a pause


@dataclass(frozen=True)
class Dot:
    """A unit as the project page shows it."""

    status: str
    attempt: int
    scripted: bool
    tokens: int

    @classmethod
    def of(cls, row: UnitRow) -> Dot:
        return cls(row.status, row.attempt, row.scripted, row.tokens)


@dataclass(frozen=True)
class Tally:
    """The stats: units by status, tokens, passes under scripted turns."""

    counts: dict[str, int]
    units: int
    tokens: int
    scripted: int

    def count(self, *statuses: str) -> int:
        return sum(self.counts.get(s, 0) for s in statuses)


@dataclass(frozen=True)
class Stats:
    """What the live fragments render: the tally, the controls, the first calls."""

    tally: Tally
    control: Control
    calls: list[HumanCall]
    more: int  # calls not listed


@dataclass
class Update:
    """What a batch of changes read: the named units' dots and calls, the controls now."""

    dots: dict[str, Dot]
    calls: dict[str, HumanCall]
    control: Control


@dataclass
class Summary:
    """One project's live data."""

    shape: Shape
    dots: dict[str, Dot]
    calls: dict[str, HumanCall]
    control: Control
    counts: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    scripted: int = 0

    def __post_init__(self) -> None:
        for dot in self.dots.values():
            self._count(dot, 1)

    @classmethod
    def load(cls, store: RedisStore, shape: Shape) -> Summary:
        """Every unit read (once, when a console starts following the project)."""
        status = project_status(store, shape.pid)
        dots = {row.unit_id: Dot.of(row) for row in status.units if row.unit_id in shape.index}
        for unit in shape.order:
            dots.setdefault(unit, Dot("pending", 0, False, 0))
        calls = {c.unit: c for c in needs_human(store, shape.pid)}
        return cls(shape, dots, calls, read_control(store, shape.pid, []))

    def stirred(self, paused_changed: bool) -> set[str]:
        """Units a pause may show differently: moving ones, and those a pause stopped."""
        if not (paused_changed or self.control.paused):
            return set()
        return {u for u, d in self.dots.items() if d.status in MOVING or d.status in STOPPED}

    def read(self, store: RedisStore, units: Iterable[str]) -> Update:
        """The named units as Redis has them now (their keys only; run in a thread)."""
        names = [u for u in units if u in self.shape.index]
        names.sort(key=self.shape.index.__getitem__)
        control = read_control(store, self.shape.pid, [])
        rows = unit_rows(store, self.shape.pid, names, control) if names else []
        waiting = [r.unit_id for r in rows if r.status in HUMAN]
        calls = {c.unit: c for c in human_calls(store, self.shape.pid, waiting)}
        return Update({r.unit_id: Dot.of(r) for r in rows}, calls, control)

    def apply(self, update: Update) -> None:
        """Take in what read found (in the event loop: pages read the summary there)."""
        for unit, dot in update.dots.items():
            self._count(self.dots[unit], -1)
            self.dots[unit] = dot
            self._count(dot, 1)
            if unit in update.calls:
                self.calls[unit] = update.calls[unit]
            else:
                self.calls.pop(unit, None)
        self.control = update.control

    def _count(self, dot: Dot, sign: int) -> None:
        self.counts[dot.status] += sign
        self.tokens += sign * dot.tokens
        self.scripted += sign * dot.scripted

    def stats(self) -> Stats:
        """A snapshot for the fragments (safe to render in another thread)."""
        order = self.shape.index
        calls = sorted(self.calls.values(),
                       key=lambda c: (HUMAN.index(c.status), order.get(c.unit, 0)))
        tally = Tally({k: v for k, v in self.counts.items() if v}, len(self.dots),
                      self.tokens, self.scripted)
        return Stats(tally, self.control, calls[:MAX_CALLS], max(0, len(calls) - MAX_CALLS))
