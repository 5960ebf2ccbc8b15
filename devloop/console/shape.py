"""A project's graph as the console draws and pages it, built once per units.json.

Whether units.json changed is asked of the store by digest (a SHA-1 of the stored bytes),
so a page or an update never fetches the whole project record to find one unit's
dependencies.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field
from functools import cached_property

from devloop.core import dag
from devloop.report.layout import DagLayout, dag_layout
from devloop.store import RedisStore

DRAW_MAX = 300  # units: past this the project page shows the layers, paged, not the drawing
PAGE_UNITS = 250  # units on one page of the layers


@dataclass(frozen=True)
class Shape:
    """Units in units.json order, their kinds, dependencies, dependents and levels."""

    pid: str
    digest: str
    company_id: str
    stack: str
    order: list[str]
    kinds: dict[str, str]
    depends_on: dict[str, list[str]]
    index: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {u: n for n, u in enumerate(self.order)})

    @cached_property
    def dependents(self) -> dict[str, list[str]]:
        return dag.dependents(self.depends_on)

    @cached_property
    def levels(self) -> dict[str, int]:
        graph = self.depends_on
        return dag.levels(graph) if not dag.check_graph(graph) else dict.fromkeys(graph, 1)

    @property
    def drawn(self) -> bool:
        """Whether the project page draws the whole DAG (else it pages the layers)."""
        return len(self.order) <= DRAW_MAX

    @cached_property
    def layout(self) -> DagLayout:
        """The report's drawing of the DAG (for a drawn project)."""
        return dag_layout(self.depends_on, self.levels)

    @cached_property
    def paged(self) -> list[str]:
        """Every unit by level, then in units.json order: the order the layers are paged in."""
        return sorted(self.order, key=lambda u: (self.levels[u], self.index[u]))

    @property
    def pages(self) -> int:
        return max(1, -(-len(self.order) // PAGE_UNITS))

    @cached_property
    def spans(self) -> list[tuple[int, int, int]]:
        """(page, the level of its first unit, of its last) for every page of the layers."""
        return [(n, self.levels[units[0]], self.levels[units[-1]])
                for n, units in enumerate(self._pages(), start=1)]

    def _pages(self) -> list[list[str]]:
        return [self.paged[i: i + PAGE_UNITS] for i in range(0, len(self.paged), PAGE_UNITS)]

    def page(self, number: int) -> list[str]:
        """The units on one page of the layers (1-based, clamped)."""
        number = min(max(number, 1), self.pages)
        return self.paged[(number - 1) * PAGE_UNITS: number * PAGE_UNITS]


class Shapes:
    """The shape of each project this console shows, rebuilt when its units.json changes."""

    def __init__(self, store: RedisStore) -> None:
        self.store = store
        self._shapes: dict[str, Shape] = {}
        self._lock = threading.Lock()

    def digest(self, pid: str) -> str | None:
        """The SHA-1 of the project's stored units.json (None: not imported)."""
        return self.store.project_digest(pid)

    def get(self, pid: str) -> Shape:
        """The project's shape as units.json is now (ProjectNotImported when it is not)."""
        digest = self.digest(pid)
        with self._lock:
            known = self._shapes.get(pid)
        if known is not None and known.digest == digest:
            return known
        raw = self.store.project_fields(pid)
        record = self.store.record_from(pid, raw)  # ProjectNotImported without units_json
        units = record.units.units
        shape = Shape(pid=pid, digest=hashlib.sha1(raw["units_json"]).hexdigest(),
                      company_id=record.company_id,
                      stack=record.stack, order=[u.id for u in units],
                      kinds={u.id: str(u.kind) for u in units},
                      depends_on={u.id: list(u.depends_on) for u in units})
        with self._lock:
            self._shapes[pid] = shape
        return shape
