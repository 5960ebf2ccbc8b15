"""Gather what a run left in a project folder into one ReportData; nothing is required
but units.json, and every unreadable file becomes a note instead of an error."""

from __future__ import annotations

import itertools
import logging
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from devloop.core import dag
from devloop.core.errors import Problem, ProjectInvalid
from devloop.core.ids import check_id
from devloop.core.models import (
    MUTATION_FILE,
    Bug,
    CoderDecision,
    RunResult,
    TimelineEvent,
    UnitsFile,
)
from devloop.fleet.control import SPEND_FILE
from devloop.fleet.records import STEPS_FILE, StepRecord
from devloop.fleet.why import blocked_by_code, story
from devloop.ledgers import BugLedger, DirSink, parse_coder_log
from devloop.ledgers.sink import read_json_lines
from devloop.ledgers.timeline import LOOP_AGENT
from devloop.project.jsonfile import parse_json, validate_model
from devloop.report.final_status import derive_statuses
from devloop.safe.safedir import Dir, Refused

log = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
_RUN_ID = re.compile(r"^run-(\d+)-(\d+)$")
FILE_CAP = 64 * 1024 * 1024  # one JSON file or coder.log
MAX_RUNS = 10_000  # run dirs read per unit
RUN_STATE = "agent-state/run.json"  # which models the runs used (devloop run writes it)
MARKS = "agent-state/scripted.json"  # the units that passed under scripted turns
LOOP_KINDS = ("loop_release", "loop_pass", "loop_retry_coder", "loop_retry_tester",
              "loop_resume", "loop_block", "loop_review")


class SpendLedger(BaseModel):
    """agent-state/spend.json: the project's spend ledger as `devloop run` left it."""

    spent_usd: float
    max_usd: float | None = None
    units: dict[str, float] = {}


@dataclass
class UnitReport:
    """One unit as the folder tells it: its place in the graph, runs, reflections, steps."""

    id: str
    kind: str
    depends_on: list[str]
    level: int
    status: str = "pending"
    block_reason: str = ""
    scripted: bool = False  # passed under the stub's scripted turns (proves the script)
    runs: list[RunResult] = field(default_factory=list)
    decisions: list[CoderDecision] = field(default_factory=list)
    loop_events: list[TimelineEvent] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    # What `devloop mutants` measured (agent-state/mutation.json), if it ran.
    mutation: dict[str, Any] | None = None

    @property
    def attempts(self) -> int:
        """The highest attempt any record of this unit mentions (0: it never started)."""
        seen = [r.attempt for r in self.runs] + [d.attempt for d in self.decisions]
        return max(seen + [s.attempt for s in self.steps], default=0)


@dataclass
class ReportData:
    """Everything the report shows, read from one project folder."""

    project_id: str
    company_id: str
    stack: str
    units: list[UnitReport]
    steps: list[StepRecord]
    bugs: list[Bug]
    timeline: list[TimelineEvent]
    notes: list[str] = field(default_factory=list)
    scripted: bool = False  # every run used the stub: its costs are priced turns, not spent
    spend: SpendLedger | None = None  # the ledger (None: the folder has none, or not valid)
    _by_id: dict[str, UnitReport] = field(default_factory=dict, init=False, repr=False,
                                          compare=False)
    _indexed: int = field(default=-1, init=False, repr=False, compare=False)  # len(units) then

    @property
    def ran(self) -> bool:
        """Whether the folder holds any trace of a run."""
        traces = (u.runs or u.decisions for u in self.units)
        return bool(self.steps or self.timeline or self.bugs or any(traces))

    def unit(self, unit_id: str) -> UnitReport | None:
        """The unit with this id, or None."""
        if self._indexed != len(self.units):  # built on the first call (units only grow)
            self._by_id = {}
            for unit in self.units:
                self._by_id.setdefault(unit.id, unit)
            self._indexed = len(self.units)
        return self._by_id.get(unit_id)


def gather(project_dir: Path) -> ReportData:
    """Read units.json (required) and whatever the run left beside it.

    The folder holds what sessions wrote: it is read through a handle that follows no
    link and reads no fifo or device (those become notes).
    """
    with Dir.open(Path(project_dir)) as root:
        return _gather(root)


def _gather(root: Dir) -> ReportData:
    units_file = _units_file(root)
    notes: list[str] = []
    graph = {u.id: list(u.depends_on) for u in units_file.units}
    depth = _levels(graph, notes)
    steps = _steps(root, notes)
    timeline = _models(root, "timeline.ndjson", TimelineEvent, notes)
    # Each unit's share of the steps and the loop's events, in one pass over each.
    steps_of: dict[str, list[StepRecord]] = defaultdict(list)
    for step in steps:
        steps_of[step.msg.unit_id].append(step)
    loop_of: dict[str | None, list[TimelineEvent]] = defaultdict(list)
    for event in timeline:
        if _trusted(event):
            loop_of[event.unit_id].append(event)
    units = [
        UnitReport(
            id=entry.id,
            kind=entry.kind,
            depends_on=list(entry.depends_on),
            level=depth.get(entry.id, 1),
            runs=_runs(root, f"units/{check_id(entry.id, 'unit id')}", notes),
            decisions=_decisions(root, f"units/{entry.id}/coder.log", notes),
            loop_events=list(loop_of.get(entry.id, ())),
            steps=list(steps_of.get(entry.id, ())),
        )
        for entry in units_file.units
    ]
    _apply_statuses(graph, units)
    mutation, _ = _json(root, MUTATION_FILE)
    for unit in units:
        found = mutation.get(unit.id) if isinstance(mutation, dict) else None
        unit.mutation = found if isinstance(found, dict) else None
    every_run_scripted = _scripted(root)
    marked = _marked(root, notes)
    for unit in units:
        unit.scripted = unit.status == "passed" and (every_run_scripted or unit.id in marked)
    return ReportData(
        project_id=units_file.project_id,
        company_id=units_file.company_id,
        stack=units_file.stack,
        units=units,
        steps=steps,
        bugs=_bugs(root, notes),
        timeline=timeline,
        notes=notes,
        scripted=every_run_scripted,
        spend=_spend(root, notes),
    )


def _spend(root: Dir, notes: list[str]) -> SpendLedger | None:
    """The spend ledger the run exported; None (costs summed from the step records) when
    the folder has none or it is not valid (a note says so)."""
    data, problems = _json(root, SPEND_FILE)
    if data is None and problems[0].message == "not found":
        return None
    ledger, more = validate_model(SpendLedger, data, SPEND_FILE) if data is not None else (None, [])
    if ledger is None:
        notes.append(f"{(problems + more)[0]}; costs are summed from the step records")
    return ledger


def _scripted(root: Dir) -> bool:
    """Whether agent-state/run.json says every run used the stub's scripted turns."""
    data, _ = _json(root, RUN_STATE)
    return isinstance(data, dict) and data.get("llms") == ["stub"]


def _marked(root: Dir, notes: list[str]) -> set[str]:
    """The units agent-state/scripted.json names as passed under scripted turns."""
    data, _ = _json(root, MARKS)
    if data is None:
        return set()
    units = data.get("units") if isinstance(data, dict) else None
    if not isinstance(units, list) or not all(isinstance(u, str) for u in units):
        notes.append(f'{MARKS} is not {{"units": [unit ids]}}: no unit is shown as scripted')
        return set()
    return set(units)


def _trusted(event: TimelineEvent) -> bool:
    """A loop event the loop itself wrote: only those say a unit passed or was blocked."""
    return event.kind in LOOP_KINDS and event.agent == LOOP_AGENT


def run_order(run: RunResult) -> tuple[int, int]:
    """Sort key of a run: (attempt, tester try) from `run-A-T`, else the result's attempt."""
    match = _RUN_ID.match(run.run_id)
    return (int(match[1]), int(match[2])) if match else (run.attempt, 0)


def _units_file(root: Dir) -> UnitsFile:
    """units.json as a model, or ProjectInvalid naming what is wrong with it."""
    data, problems = _json(root, "units.json")
    if data is None:
        raise ProjectInvalid(problems)
    units, problems = validate_model(UnitsFile, data, "units.json")
    if units is None:
        raise ProjectInvalid(problems)
    return units


def _levels(graph: dict[str, list[str]], notes: list[str]) -> dict[str, int]:
    """dag.levels, or every unit on level 1 with a note when the graph is not a DAG."""
    issues = dag.check_graph(graph)
    if issues:
        notes.append("units.json: the unit graph is not a DAG; every unit is drawn on one level")
        return dict.fromkeys(graph, 1)
    return dag.levels(graph)


def _json(root: Dir, rel: str) -> tuple[Any, list[Problem]]:
    """A JSON file's value, or the problems met reading it (a link or fifo is one)."""
    try:
        text = root.read_text(rel, cap=FILE_CAP)
    except FileNotFoundError:
        return None, [Problem(rel, "file", "not found", f"create {rel}")]
    except OSError as exc:
        return None, [Problem(rel, "file", f"cannot be read ({_why(exc)})", "make it a file")]
    return parse_json(text, rel)


def _why(exc: OSError) -> str:
    return exc.reason if isinstance(exc, Refused) else exc.strerror or str(exc)


def _steps(root: Dir, notes: list[str]) -> list[StepRecord]:
    """Step records from agent-state/fleet-steps.ndjson, oldest first."""
    records = _models(root, STEPS_FILE, StepRecord, notes)
    return sorted(records, key=lambda r: r.started_at)


def _models(root: Dir, rel: str, model: type[M], notes: list[str]) -> list[M]:
    """The valid lines of an ndjson file as models; invalid lines are counted in a note."""
    out: list[M] = []
    bad = 0
    try:
        objects = list(read_json_lines(DirSink(root, rel)))
    except FileNotFoundError:
        return []
    except OSError as exc:
        notes.append(f"{rel}: {_why(exc)}; skipped")
        return []
    for obj in objects:
        try:
            out.append(model.model_validate(obj))
        except ValidationError as exc:
            bad += 1
            log.warning("%s: invalid line skipped: %s", rel, exc)
    if bad:
        notes.append(f"{PurePosixPath(rel).name}: {bad} invalid line(s) skipped")
    return out


def _runs(root: Dir, unit: str, notes: list[str]) -> list[RunResult]:
    """Every readable runs/*/result.json of a unit, in run order."""
    try:
        with root.opendir(f"{unit}/runs") as runs, os.scandir(runs.fd) as entries:
            names = [e.name for e in itertools.islice(entries, MAX_RUNS)]
    except FileNotFoundError:
        return []
    except OSError as exc:
        notes.append(f"{unit}/runs: {_why(exc)}; its runs are not shown")
        return []
    found = []
    for name in sorted(names):
        rel = f"{unit}/runs/{name}/result.json"
        data, problems = _json(root, rel)
        if data is None and problems[0].message == "not found":
            continue
        run, more = validate_model(RunResult, data, rel) if data is not None else (None, [])
        if run is None:
            notes.append(f"{(problems + more)[0]}; run skipped")
            continue
        found.append(run)
    return sorted(found, key=run_order)


def _decisions(root: Dir, rel: str, notes: list[str]) -> list[CoderDecision]:
    """The coder.log decisions (reflections) of a unit; none when the file is missing."""
    try:
        return parse_coder_log(root.read_text(rel, cap=FILE_CAP))
    except FileNotFoundError:
        return []
    except OSError as exc:
        notes.append(f"{rel}: {_why(exc)}; skipped")
        return []


def _latest_ok(runs: list[RunResult], believe_green: bool) -> bool | None:
    """Whether the latest run was green (None: no run, or a green one not believed)."""
    if not runs:
        return None
    ok = max(runs, key=run_order).ok
    return ok if ok is False or believe_green else None


def _bugs(root: Dir, notes: list[str]) -> list[Bug]:
    """Bugs folded from bugs.ndjson, in the order they were opened."""
    try:
        return BugLedger(DirSink(root, "bugs.ndjson")).list()
    except FileNotFoundError:
        return []
    except OSError as exc:
        notes.append(f"bugs.ndjson: {_why(exc)}; skipped")
        return []


def _apply_statuses(graph: dict[str, list[str]], units: list[UnitReport]) -> None:
    """Set each unit's final status and, when blocked, the loop's reason.

    In a folder DevLoop ran (loop events or step records), a green result.json alone
    never makes a unit passed: the tester's session writes that file, the loop decides.
    """
    ran = any(u.loop_events or u.steps for u in units)
    facts = {
        u.id: (
            [e.kind for e in u.loop_events],
            _latest_ok(u.runs, believe_green=not ran),
            bool(u.steps or u.decisions),
        )
        for u in units
    }
    statuses = derive_statuses(graph, facts)
    for unit in units:
        unit.status = statuses[unit.id]
        blocks = [e for e in unit.loop_events if e.kind == "loop_block"]
        if unit.status == "blocked" and blocks:
            unit.block_reason = _block_reason(blocks[-1], unit.steps)


def _block_reason(block: TimelineEvent, steps: list[StepRecord]) -> str:
    """The loop's reason for a block and, when the code's failures caused it, those
    failures first cause first (as `devloop status` says it)."""
    match = _RUN_ID.match(block.ref or "")
    if match is None or not blocked_by_code(steps, int(match[1])):
        return block.summary
    return story(block.summary, steps, int(match[1]))
