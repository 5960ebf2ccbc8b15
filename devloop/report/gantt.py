"""Geometry of the step timeline: bars per worker lane (or per unit lane), a seconds axis. Pure.

Each bar carries two y positions, one for each grouping, so the page can switch between
"by worker" and "by unit" without drawing the bars twice.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from devloop.fleet.records import StepRecord

LABEL_W = 150
PLOT_W = 1060
RIGHT = 90
TOP = 12
AXIS_H = 30
LANE_H = 34
BAR_H = 20
MIN_BAR = 4.0
CHAR_W = 6.4  # average width of an 11px sans-serif character
NICE = (0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)


@dataclass(frozen=True)
class BarLabel:
    """Where a bar's label goes ("in", "right" or "none") and its text."""

    at: str
    text: str


NO_LABEL = BarLabel("none", "")


@dataclass(frozen=True)
class Bar:
    """One coder, tester or decide step."""

    step: StepRecord
    label: str
    x: float
    w: float
    y_worker: float
    y_unit: float
    wait_x: float | None  # where the queue wait began (sent_at), if before the start
    outcome: str  # "ok" | "red" | "" (tester bars only)
    label_worker: BarLabel = NO_LABEL
    label_unit: BarLabel = NO_LABEL


@dataclass(frozen=True)
class Lane:
    """A row: its key (worker or unit), label and top y."""

    key: str
    label: str
    y: float


@dataclass(frozen=True)
class Gantt:
    """Bars, lanes for both groupings, axis ticks and sizes."""

    bars: list[Bar]
    worker_lanes: list[Lane]
    unit_lanes: list[Lane]
    ticks: list[tuple[float, str]]
    t0: float
    span_s: float
    width: float
    height_worker: float
    height_unit: float


def worker_of(step: StepRecord) -> str:
    """The worker process a step ran in: `host:pid` out of `host:pid:task-id`."""
    return ":".join(step.worker.split(":")[:2])


def step_label(step: StepRecord) -> str:
    """`unit #attempt` (a tester's second try adds `.2`)."""
    suffix = f".{step.tester_try}" if step.role != "coder" and step.tester_try > 1 else ""
    return f"{step.msg.unit_id} #{step.attempt}{suffix}"


def gantt_layout(steps: Sequence[StepRecord], units: Sequence[str]) -> Gantt:
    """Place every step on a shared seconds axis starting at the run's first send."""
    t0 = min((min(s.sent_at or s.started_at, s.started_at) for s in steps), default=0.0)
    end = max((s.ended_at for s in steps), default=t0)
    span = max(end - t0, 1.0)
    scale = PLOT_W / span
    first: dict[str, float] = {}  # worker -> its first start
    for s in steps:
        w = worker_of(s)
        first[w] = min(first.get(w, s.started_at), s.started_at)
    workers = sorted(first, key=first.__getitem__)
    stepped = {s.msg.unit_id for s in steps}
    unit_keys = [u for u in units if u in stepped]
    by_worker = {w: i for i, w in enumerate(workers)}
    by_unit = {u: i for i, u in enumerate(unit_keys)}
    raw = [
        _bar(s, t0, scale, by_worker[worker_of(s)], by_unit.get(s.msg.unit_id, 0)) for s in steps
    ]
    bars = _place_labels(raw)
    return Gantt(
        bars=bars,
        worker_lanes=[Lane(w, w, _lane_top(i)) for i, w in enumerate(workers)],
        unit_lanes=[Lane(u, u, _lane_top(i)) for i, u in enumerate(unit_keys)],
        ticks=_ticks(span, scale),
        t0=t0,
        span_s=span,
        width=LABEL_W + PLOT_W + RIGHT,
        height_worker=_height(len(workers)),
        height_unit=_height(len(unit_keys)),
    )


def _lane_top(index: int) -> float:
    return TOP + AXIS_H + index * LANE_H


def _height(lanes: int) -> float:
    return TOP + AXIS_H + lanes * LANE_H + 8


def _bar(step: StepRecord, t0: float, scale: float, worker_row: int, unit_row: int) -> Bar:
    """A bar before its label is placed."""
    x = LABEL_W + (step.started_at - t0) * scale
    w = max((step.ended_at - step.started_at) * scale, MIN_BAR)
    sent = step.sent_at
    wait_x = LABEL_W + (sent - t0) * scale if sent is not None and sent < step.started_at else None
    pad = (LANE_H - BAR_H) / 2
    outcome = ""
    if step.role == "tester" and "ok" in step.output:
        outcome = "ok" if step.output.get("ok") else "red"
    return Bar(
        step=step,
        label=step_label(step),
        x=x,
        w=w,
        y_worker=_lane_top(worker_row) + pad,
        y_unit=_lane_top(unit_row) + pad,
        wait_x=wait_x,
        outcome=outcome,
    )


def _place_labels(bars: Sequence[Bar]) -> list[Bar]:
    """Every bar with its label in each grouping: inside, else to the right, full or short.

    One sort of each lane's bar starts, then a binary search per bar for the next start
    at or after its end: the room to its right.
    """
    worker_room = _room(bars, lambda b: b.y_worker)
    unit_room = _room(bars, lambda b: b.y_unit)
    return [
        replace(bar, label_worker=_fit(bar, worker_room[i]), label_unit=_fit(bar, unit_room[i]))
        for i, bar in enumerate(bars)
    ]


def _room(bars: Sequence[Bar], lane_of: Callable[[Bar], float]) -> list[float]:
    """Per bar, the x where the next bar of its lane starts (the plot's right end if none)."""
    starts: dict[float, list[float]] = defaultdict(list)
    for bar in bars:
        starts[lane_of(bar)].append(bar.x)
    for xs in starts.values():
        xs.sort()
    end = LABEL_W + PLOT_W + RIGHT
    out = []
    for bar in bars:
        xs = starts[lane_of(bar)]
        # A bar is at least MIN_BAR wide, so its own start is never at or after its end.
        at = bisect.bisect_left(xs, bar.x + bar.w - 0.5)
        out.append(xs[at] if at < len(xs) else end)
    return out


def _fit(bar: Bar, next_x: float) -> BarLabel:
    """The first of (full, short) x (inside, right of the bar) that fits before next_x (where
    the lane's next bar starts); decide bars get none."""
    if bar.step.role == "decide":
        return NO_LABEL
    room = next_x - (bar.x + bar.w) - 6
    for text in (bar.label, f"#{bar.label.rsplit('#', 1)[-1]}"):
        need = len(text) * CHAR_W + 10
        if bar.w >= need:
            return BarLabel("in", text)
        if room >= need:
            return BarLabel("right", text)
    return NO_LABEL


def _ticks(span: float, scale: float) -> list[tuple[float, str]]:
    """About eight round-numbered ticks across the span: (x, label)."""
    step = next((n for n in NICE if span / n <= 10), NICE[-1])
    out = []
    n = 0
    while n * step <= span + 1e-9:
        seconds = n * step
        text = f"{seconds:g}s" if seconds < 120 else f"{seconds / 60:g}m"
        out.append((LABEL_W + seconds * scale, text))
        n += 1
    return out
