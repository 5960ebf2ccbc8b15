"""What each console page shows, read from Redis: the project (the report's DAG, live), a
unit (attempts, reflections, failures and hints, bugs, review, live output), who needs a
person."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from devloop import dag
from devloop.artifacts import binary_summary, is_text, marked
from devloop.fleet.control import Control, read_control
from devloop.fleet.human import HumanCall, call_for, needs_human
from devloop.fleet.output import OutputSoFar, latest_run, read_output
from devloop.fleet.records import StepRecord, steps_of
from devloop.fleet.review import ReviewDiff, review_diff
from devloop.fleet.status import ProjectStatus, UnitRow, project_status
from devloop.ledgers import BugLedger, Timeline
from devloop.ledgers.timeline import LOOP_AGENT
from devloop.models import Bug, TimelineEvent, UnitSpec
from devloop.report.data import LOOP_KINDS, UnitReport
from devloop.report.layout import DagLayout, dag_layout
from devloop.report.views import Attempt, attempts
from devloop.roles import context
from devloop.store import RedisStore, UnitState

FEED = 60  # timeline events on the project page
TEST_FILE_CHARS = 20_000


@dataclass(frozen=True)
class Node:
    """A unit as the DAG drawing wants it."""

    id: str
    kind: str
    status: str
    attempts: int
    scripted: bool = False  # passed under the stub's scripted turns


@dataclass
class ProjectView:
    """The project page."""

    pid: str
    company_id: str
    stack: str
    status: ProjectStatus
    control: Control
    calls: list[HumanCall]
    layout: DagLayout
    nodes: dict[str, Node]
    feed: list[TimelineEvent]
    tokens: int
    cost_usd: float

    @property
    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in self.status.units:
            out[row.status] = out.get(row.status, 0) + 1
        return out


def project_view(store: RedisStore, pid: str) -> ProjectView:
    """Everything the project page shows."""
    record = store.project_record(pid)
    graph = {u.id: list(u.depends_on) for u in record.units.units}
    status = project_status(store, pid)
    levels = dag.levels(graph) if not dag.check_graph(graph) else dict.fromkeys(graph, 1)
    nodes = {
        row.unit_id: Node(row.unit_id, _kind(record.units.unit(row.unit_id)), row.status,
                          row.attempt, row.scripted)
        for row in status.units
    }
    return ProjectView(
        pid=pid,
        company_id=record.company_id,
        stack=record.stack,
        status=status,
        control=read_control(store, pid),
        calls=needs_human(store, pid),
        layout=dag_layout(graph, levels),
        nodes=nodes,
        feed=feed(store, pid)[-FEED:][::-1],
        tokens=sum(r.tokens for r in status.units),
        cost_usd=status.spent_usd,  # the ledger's total, as the stats show it
    )


def summary_view(store: RedisStore, pid: str) -> tuple[ProjectStatus, Control, list[HumanCall]]:
    """What a project page's live fragments show (counts, spend, who needs a person)."""
    return project_status(store, pid), read_control(store, pid), needs_human(store, pid)


def _kind(entry: Any) -> str:
    return str(entry.kind) if entry is not None else "?"


def feed(store: RedisStore, pid: str, unit: str | None = None) -> list[TimelineEvent]:
    """The project's timeline (one unit's, when given), oldest first."""
    return Timeline(store.sink(pid, "timeline")).events(unit_id=unit)


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


def unit_view(store: RedisStore, pid: str, unit: str) -> UnitView:
    """Everything the unit page shows (KeyError for a unit the project does not have)."""
    record = store.project_record(pid)
    entry = record.units.unit(unit)
    if entry is None:
        raise KeyError(unit)
    graph = {u.id: list(u.depends_on) for u in record.units.units}
    state = store.get_state(pid, unit)
    files = store.unit_files(pid, unit).files
    steps = steps_of(store, pid, [unit])[unit]
    row = next(r for r in project_status(store, pid).units if r.unit_id == unit)
    report = UnitReport(
        id=unit, kind=entry.kind, depends_on=list(entry.depends_on), level=1,
        runs=[r for runs in context.runs_by_attempt(files).values() for r in runs],
        decisions=context.decisions(files),
        loop_events=[e for e in feed(store, pid, unit)
                     if e.kind in LOOP_KINDS and e.agent == LOOP_AGENT],
        steps=steps,
    )
    tester = _last_tester(steps)
    view = UnitView(
        pid=pid, unit=unit, kind=entry.kind, depends_on=list(entry.depends_on),
        dependents=dag.dependents(graph).get(unit, []), state=state, row=row,
        spec=store.unit_spec(pid, unit), story=attempts(report),
        bugs=BugLedger(store.sink(pid, "bugs")).list(unit_id=unit),
        call=(call_for(unit, state, tester, steps) if state.status in ("blocked", "review")
              else None),
        control=read_control(store, pid),
        output=read_output(store, pid, unit, latest_run(store, pid, unit)),
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


def project_ids(store: RedisStore) -> list[str]:
    """Every project imported into this Redis."""
    found = []
    for key in store.client.scan_iter(match="devloop:*:project", count=500):
        name = key.decode(errors="replace")
        pid = name[len("devloop:"):-len(":project")]
        if pid and ":" not in pid:
            found.append(pid)
    return sorted(found)


def event_json(data: dict[str, Any]) -> str:
    """An SSE event's data: compact JSON."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
