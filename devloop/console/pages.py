"""What each console page shows, read from Redis: the project (the report's DAG, live), a
unit (attempts, reflections, failures and hints, bugs, review, live output), who needs a
person."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from devloop.console.shape import Shape, Shapes
from devloop.console.summary import Dot, Stats, Summary, Tally
from devloop.core.artifacts import binary_summary, is_text, marked
from devloop.core.models import Bug, TimelineEvent, UnitSpec
from devloop.fleet.control import Control, read_control
from devloop.fleet.human import HumanCall, call_for
from devloop.fleet.records import StepRecord, steps_of
from devloop.fleet.review import ReviewDiff, review_diff
from devloop.fleet.status import UnitRow, unit_rows
from devloop.ledgers import BugLedger, Timeline
from devloop.ledgers.timeline import LOOP_AGENT
from devloop.report.data import LOOP_KINDS, UnitReport
from devloop.report.layout import DagLayout
from devloop.report.tables import Attempt, attempts
from devloop.roles import context
from devloop.store import RedisStore, UnitState
from devloop.store.output import OutputSoFar
from devloop.store.streams import entry_lines

FEED = 60  # timeline events on the project page
TEST_FILE_CHARS = 20_000


@dataclass(frozen=True)
class Node:
    """A unit as the DAG drawing (or a page of its layers) wants it."""

    id: str
    kind: str
    status: str
    attempts: int
    scripted: bool = False  # passed under the stub's scripted turns


@dataclass
class ProjectView:
    """The project page: the whole DAG drawn up to DRAW_MAX units, else one page of its
    layers (PAGE_UNITS units), so the page stays bounded however large the project."""

    pid: str
    company_id: str
    stack: str
    units: int
    stats: Stats
    nodes: dict[str, Node]  # drawn: every unit; paged: the page's
    layout: DagLayout | None  # drawn only
    layers: list[tuple[int, list[Node]]]  # paged: the page's units by level
    page: int
    pages: list[tuple[int, int, int]]  # paged: (page, its first level, its last level)
    feed: list[TimelineEvent]

    @property
    def drawn(self) -> bool:
        return self.layout is not None

    @property
    def control(self) -> Control:
        return self.stats.control

    @property
    def tokens(self) -> int:
        return self.stats.tally.tokens

    @property
    def cost_usd(self) -> float:
        return self.stats.control.spent_usd  # the ledger's total, as the stats show it


def project_view(store: RedisStore, pid: str, page: int = 1) -> ProjectView:
    """Everything the project page shows, read afresh (the console's pages read it from the
    project's follower instead: hub.py)."""
    shape = Shapes(store).get(pid)
    summary = Summary.load(store, shape)
    return page_view(store, shape, summary.dots, summary.stats(), page)


def page_units(shape: Shape, page: int) -> list[str]:
    """The units a project page shows: every one when drawn, else one page of the layers."""
    return shape.order if shape.drawn else shape.page(page)


def page_view(store: RedisStore, shape: Shape, dots: Mapping[str, Dot], stats: Stats,
              page: int = 1, upto: str = "+") -> ProjectView:
    """The project page from what its follower holds: dots of the units it shows, the
    stats, the feed up to the timeline entry `upto` (the page's position)."""
    page = min(max(page, 1), shape.pages)
    nodes = {u: Node(u, shape.kinds[u], d.status, d.attempt, d.scripted)
             for u in page_units(shape, page) if (d := dots.get(u)) is not None}
    layers: dict[int, list[Node]] = {}
    if not shape.drawn:
        for unit, node in nodes.items():
            layers.setdefault(shape.levels[unit], []).append(node)
    spans = shape.spans if not shape.drawn else []
    return ProjectView(
        pid=shape.pid, company_id=shape.company_id, stack=shape.stack, units=len(shape.order),
        stats=stats, nodes=nodes, layout=shape.layout if shape.drawn else None,
        layers=sorted(layers.items()), page=page, pages=spans,
        feed=recent_feed(store, shape.pid, upto),
    )


def summary_view(store: RedisStore, pid: str) -> tuple[Tally, Control, list[HumanCall]]:
    """What a project page's live fragments show (counts, spend, who needs a person), read
    afresh."""
    stats = Summary.load(store, Shapes(store).get(pid)).stats()
    return stats.tally, stats.control, stats.calls


def recent_feed(store: RedisStore, pid: str, upto: str = "+") -> list[TimelineEvent]:
    """The newest FEED timeline events up to the entry upto, newest first."""
    if upto == "0-0":
        return []
    out = []
    for _id, fields in store.timeline_before(pid, upto, FEED):
        for line in entry_lines(fields):
            try:
                out.append(TimelineEvent.model_validate_json(line))
            except ValueError:
                continue  # as Timeline.events skips a line it cannot read
    return out


def unit_feed(store: RedisStore, pid: str, unit: str) -> list[TimelineEvent]:
    """The unit's timeline, oldest first, read from its own stream (store/ledgerindex.py)."""
    return Timeline(store.unit_sink(pid, "timeline", unit)).events(unit_id=unit)


@dataclass
class UnitView:
    """The unit page."""

    pid: str
    unit: str
    kind: str
    depends_on: list[str]
    dependents: list[str]
    state: UnitState
    row: UnitRow
    spec: UnitSpec | None
    story: list[Attempt]
    bugs: list[Bug]
    call: HumanCall | None
    control: Control
    output: OutputSoFar
    review: ReviewDiff | None = None
    tests: list[tuple[str, str]] = field(default_factory=list)
    coverage: dict[str, Any] | None = None


def unit_view(store: RedisStore, pid: str, unit: str, shape: Shape | None = None) -> UnitView:
    """Everything the unit page shows (KeyError for a unit the project does not have),
    read from that unit's keys and the project's few: never every unit's."""
    shape = shape or Shapes(store).get(pid)
    if unit not in shape.index:
        raise KeyError(unit)
    state = store.get_state(pid, unit)
    files = store.unit_files(pid, unit).files
    steps = steps_of(store, pid, [unit])[unit]
    control = read_control(store, pid, [unit])
    [row] = unit_rows(store, pid, [unit], control)
    report = UnitReport(
        id=unit, kind=shape.kinds[unit], depends_on=list(shape.depends_on[unit]), level=1,
        runs=[r for runs in context.runs_by_attempt(files).values() for r in runs],
        decisions=context.decisions(files),
        loop_events=[e for e in unit_feed(store, pid, unit)
                     if e.kind in LOOP_KINDS and e.agent == LOOP_AGENT],
        steps=steps,
    )
    tester = _last_tester(steps)
    view = UnitView(
        pid=pid, unit=unit, kind=shape.kinds[unit], depends_on=list(shape.depends_on[unit]),
        dependents=shape.dependents.get(unit, []), state=state, row=row,
        spec=store.unit_spec(pid, unit), story=attempts(report),
        bugs=BugLedger(store.unit_sink(pid, "bugs", unit)).list(unit_id=unit),
        call=(call_for(unit, state, tester, steps) if state.status in ("blocked", "review")
              else None),
        control=control,
        output=store.read_output(pid, unit, store.latest_output_run(pid, unit)),
    )
    view.tests = [(path, _text(data)) for path, data in sorted(files.items())
                  if path.startswith("tests/")]
    if tester is not None:
        view.coverage = {k: tester.get(k) for k in
                         ("acceptance_coverage", "contract_coverage", "summary", "run_id")}
        view.coverage["code"] = tester.get("coverage")  # line and branch coverage of code/
    if state.status == "review":
        view.review = review_diff(store, pid, unit)
    return view


def _last_tester(steps: list[StepRecord]) -> dict[str, Any] | None:
    testers = [s for s in steps if s.role == "tester"]
    return testers[-1].output if testers else None


def _text(data: bytes) -> str:
    if not is_text(data):
        return binary_summary(data)  # never its bytes as mojibake
    # What a reader would not see (bidi controls, invisible controls) reads <U+202E>.
    text = "\n".join(marked(line) for line in data.decode("utf-8").splitlines())
    return text if len(text) <= TEST_FILE_CHARS else text[:TEST_FILE_CHARS] + "\n[...]\n"


def event_json(data: dict[str, Any]) -> str:
    """An SSE event's data: compact JSON."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
