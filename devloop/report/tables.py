"""Tables and per-attempt stories derived from ReportData for the template. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from devloop.core.models import CoderDecision, RunResult, TimelineEvent
from devloop.fleet.records import StepRecord
from devloop.fleet.why import rerun_green
from devloop.report.data import ReportData, SpendLedger, UnitReport, run_order

_RUN_ATTEMPT = re.compile(r"^run-(\d+)-\d+$")


@dataclass(frozen=True)
class CostRow:
    """Tokens, dollars and busy time of one unit (or the totals)."""

    unit: str
    status: str
    attempts: int
    coder_tokens: int
    tester_tokens: int
    cost_usd: float
    busy_s: float
    scripted: bool = False  # passed under the stub's scripted turns

    @property
    def tokens(self) -> int:
        """Coder plus tester tokens."""
        return self.coder_tokens + self.tester_tokens


@dataclass
class Attempt:
    """One attempt of a unit: the coder's reflection, the test runs, the loop's decision."""

    number: int
    decision: CoderDecision | None = None
    runs: list[RunResult] = field(default_factory=list)
    loop: list[TimelineEvent] = field(default_factory=list)
    self_check: list[str] = field(default_factory=list)  # what failed the coder's validation
    coder_end: str | None = None  # how the coder's session ended when it did not complete
    rerun: str | None = None  # a green by a zero-token re-run: on which code, no session


def cost_row(unit: UnitReport, spend: SpendLedger | None = None) -> CostRow:
    """The cost line of one unit: its share of the spend ledger (without one, the sum of
    its step records' costs)."""
    return CostRow(
        unit=unit.id,
        status=unit.status,
        attempts=unit.attempts,
        coder_tokens=_tokens(unit.steps, "coder"),
        tester_tokens=_tokens(unit.steps, "tester"),
        cost_usd=(spend.units.get(unit.id, 0.0) if spend is not None
                  else sum(s.cost_usd for s in unit.steps)),
        busy_s=sum(max(s.ended_at - s.started_at, 0.0) for s in unit.steps),
        scripted=unit.scripted,
    )


def cost_table(data: ReportData) -> tuple[list[CostRow], CostRow]:
    """One row per unit and the totals row (the ledger's total, when the folder has it)."""
    rows = [cost_row(u, data.spend) for u in data.units]
    total = CostRow(
        unit="total",
        status="",
        attempts=sum(r.attempts for r in rows),
        coder_tokens=sum(r.coder_tokens for r in rows),
        tester_tokens=sum(r.tester_tokens for r in rows),
        cost_usd=data.spend.spent_usd if data.spend else sum(r.cost_usd for r in rows),
        busy_s=sum(r.busy_s for r in rows),
    )
    return rows, total


def attempts(unit: UnitReport) -> list[Attempt]:
    """The unit's story attempt by attempt, oldest first."""
    story: dict[int, Attempt] = {}

    def at(number: int) -> Attempt:
        return story.setdefault(number, Attempt(number))

    for decision in unit.decisions:
        at(decision.attempt).decision = decision  # the last block for an attempt wins
    for run in sorted(unit.runs, key=run_order):
        at(run_order(run)[0]).runs.append(run)
    for event in unit.loop_events:
        if event.kind == "loop_release":
            continue  # the start of attempt 1, not a decision about an attempt
        match = _RUN_ATTEMPT.match(event.ref or "")
        at(int(match[1]) if match else max(story, default=1)).loop.append(event)
    for number in {s.attempt for s in unit.steps if s.role == "tester"}:
        if (words := rerun_green(unit.steps, number)) is not None:
            at(number).rerun = words
    for step in unit.steps:
        made = step.outcome
        if step.role != "coder" or made is None or made.status == "completed":
            continue
        attempt = at(step.attempt)
        attempt.coder_end = f"{made.status} ({made.reason or 'no reason'})"
        if made.reason == "validation_failed" and made.summary:
            attempt.self_check = [item for item in made.summary.split("; ") if item]
    return [story[n] for n in sorted(story)]


def wall_time(steps: Sequence[StepRecord]) -> float:
    """Seconds from the first send to the last step's end (0 with no steps)."""
    if not steps:
        return 0.0
    start = min(min(s.sent_at or s.started_at, s.started_at) for s in steps)
    return max(s.ended_at for s in steps) - start


def _tokens(steps: Sequence[StepRecord], role: str) -> int:
    return sum(s.tokens for s in steps if s.role == role)
