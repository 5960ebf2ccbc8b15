"""Geometry of the unit DAG: one column per dependency level, edges left to right. Pure.

An edge that skips levels passes through a reserved slot in every column it crosses
(a "waypoint", as in Sugiyama layouts), so it never runs through another unit's box.
Rows in a column follow the mean row of what feeds them, which keeps crossings few.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NODE_W = 210
NODE_H = 54
WAY_H = 16  # height of a waypoint slot
COL_GAP = 100
ROW_GAP = 22
PAD = 24
LOOP_BEND = 60


@dataclass(frozen=True)
class NodeBox:
    """A unit's box: top-left corner and size."""

    unit: str
    x: float
    y: float
    w: float = NODE_W
    h: float = NODE_H


@dataclass(frozen=True)
class EdgePath:
    """An edge from a dependency to its dependent, as an SVG path."""

    source: str
    target: str
    d: str


@dataclass(frozen=True)
class DagLayout:
    """Every box and edge, and the drawing's size."""

    nodes: list[NodeBox]
    edges: list[EdgePath]
    width: float
    height: float


Slot = tuple[str, ...]  # ("unit", id) or ("way", source, target, level)


def dag_layout(graph: Mapping[str, Sequence[str]], levels: Mapping[str, int]) -> DagLayout:
    """Boxes in level columns, waypoints for long edges, and a path for every edge."""
    columns = _columns(graph, levels)
    heights = [_column_height(c) for c in columns]
    height = 2 * PAD + max(heights, default=0)
    pos: dict[Slot, tuple[float, float]] = {}  # slot -> (x, centre y)
    for index, column in enumerate(columns):
        y = (height - heights[index]) / 2
        for slot in column:
            h = _slot_h(slot)
            pos[slot] = (PAD + index * (NODE_W + COL_GAP), y + h / 2)
            y += h + ROW_GAP
    boxes = {
        s[1]: NodeBox(s[1], x, cy - NODE_H / 2) for s, (x, cy) in pos.items() if s[0] == "unit"
    }
    edges = [
        EdgePath(dep, unit, _path(boxes[dep], boxes[unit], _waypoints(pos, dep, unit, levels)))
        for unit, deps in graph.items()
        for dep in deps
        if dep in boxes and dep != unit
    ]
    width = 2 * PAD + len(columns) * NODE_W + max(len(columns) - 1, 0) * COL_GAP
    if any(boxes[e.source].x == boxes[e.target].x for e in edges):
        width += LOOP_BEND  # room for the loops drawn beside a flat (cyclic) graph
    return DagLayout([boxes[u] for u in graph], edges, width, height)


def _columns(graph: Mapping[str, Sequence[str]], levels: Mapping[str, int]) -> list[list[Slot]]:
    """Slots per level (units and waypoints), each column sorted by its feeders' mean row."""
    depth = max(levels.values(), default=0)
    columns: list[list[Slot]] = [[] for _ in range(depth)]
    feeders: dict[Slot, list[Slot]] = {}
    for unit, deps in graph.items():
        level = levels.get(unit, 1)
        slot: Slot = ("unit", unit)
        columns[level - 1].append(slot)
        feeders[slot] = []
        for dep in deps:
            if dep not in graph or dep == unit:
                continue
            prev: Slot = ("unit", dep)
            for mid in range(levels.get(dep, 1) + 1, level):
                way: Slot = ("way", dep, unit, str(mid))
                columns[mid - 1].append(way)
                feeders[way] = [prev]
                prev = way
            feeders[slot].append(prev)
    row: dict[Slot, float] = {}
    for column in columns:
        column.sort(key=lambda s: (_mean([row[f] for f in feeders[s] if f in row]), s))
        row.update({s: float(i) for i, s in enumerate(column)})
    return [c for c in columns if c]


def _waypoints(
    pos: Mapping[Slot, tuple[float, float]], dep: str, unit: str, levels: Mapping[str, int]
) -> list[tuple[float, float]]:
    """Centres of the waypoint slots of the edge dep -> unit, left to right."""
    span = range(levels.get(dep, 1) + 1, levels.get(unit, 1))
    return [pos[("way", dep, unit, str(mid))] for mid in span]


def _slot_h(slot: Slot) -> float:
    return NODE_H if slot[0] == "unit" else WAY_H


def _column_height(column: Sequence[Slot]) -> float:
    return sum(_slot_h(s) for s in column) + max(len(column) - 1, 0) * ROW_GAP


def _mean(values: list[float]) -> float:
    """The mean, or -1 for no values (roots sort first, by id)."""
    return sum(values) / len(values) if values else -1.0


def _path(a: NodeBox, b: NodeBox, ways: Sequence[tuple[float, float]]) -> str:
    """Curves from a's right edge through each waypoint slot to just before b's left edge."""
    x1, y1 = a.x + a.w, a.y + a.h / 2
    x2, y2 = b.x - 6, b.y + b.h / 2  # room for the arrowhead
    if x2 <= x1:  # same column (a cyclic graph drawn flat): loop around the right side
        x2 = b.x + b.w + 6
        return f"M{x1:.1f},{y1:.1f} " + _curve(x1, y1, x2, y2, LOOP_BEND, back=True)
    parts = [f"M{x1:.1f},{y1:.1f}"]
    for wx, wy in ways:
        parts.append(_curve(x1, y1, wx, wy, (wx - x1) / 2))
        x1, y1 = wx + NODE_W, wy
        parts.append(f"L{x1:.1f},{y1:.1f}")
    parts.append(_curve(x1, y1, x2, y2, (x2 - x1) / 2))
    return " ".join(parts)


def _curve(x1: float, y1: float, x2: float, y2: float, bend: float, back: bool = False) -> str:
    """A horizontal-tangent cubic to (x2, y2); `back` bends both ends to the right."""
    c2x = x2 + bend if back else x2 - bend
    return f"C{x1 + bend:.1f},{y1:.1f} {c2x:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
