"""The unit graph: validation, cycles, topological order, ready set, critical path. Pure.

A graph is a mapping unit id -> ids it depends on (edges point at prerequisites).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

Graph = Mapping[str, Sequence[str]]


@dataclass(frozen=True)
class GraphIssue:
    """Something wrong with the graph; `unit` is where it shows, `cycle` spells a loop out."""

    kind: str  # "unknown_dependency" | "self_dependency" | "cycle"
    unit: str
    dependency: str | None = None
    cycle: tuple[str, ...] = ()

    @property
    def cycle_text(self) -> str:
        """`a -> b -> c -> a`."""
        return " -> ".join((*self.cycle, self.cycle[0])) if self.cycle else ""


def check_graph(graph: Graph) -> list[GraphIssue]:
    """Unknown dependencies, self-dependencies and every elementary cycle found by DFS."""
    issues: list[GraphIssue] = []
    for unit, deps in graph.items():
        for dep in deps:
            if dep == unit:
                issues.append(GraphIssue("self_dependency", unit, dep))
            elif dep not in graph:
                issues.append(GraphIssue("unknown_dependency", unit, dep))
    issues.extend(GraphIssue("cycle", c[0], cycle=c) for c in find_cycles(graph))
    return issues


def find_cycles(graph: Graph) -> list[tuple[str, ...]]:
    """Cycles (length >= 2) met by a depth-first walk, each rotated to start at its least id."""
    white, grey, black = 0, 1, 2
    color = dict.fromkeys(graph, white)
    found: dict[tuple[str, ...], None] = {}
    for start in sorted(graph):
        if color[start] != white:
            continue
        # An explicit stack, not recursion: a chain of thousands of units is a valid project.
        stack = [start]
        place = {start: 0}  # unit -> its index on stack
        todo = [iter(graph[start])]
        color[start] = grey
        while todo:
            dep = next(todo[-1], None)
            if dep is None:
                done = stack.pop()
                del place[done]
                todo.pop()
                color[done] = black
                continue
            if dep == stack[-1] or dep not in graph:
                continue
            if color[dep] == grey:
                loop = stack[place[dep] :]
                # Rotate so the same loop found from another start reads the same.
                first = loop.index(min(loop))
                found[tuple(loop[first:] + loop[:first])] = None
            elif color[dep] == white:
                color[dep] = grey
                place[dep] = len(stack)
                stack.append(dep)
                todo.append(iter(graph[dep]))
    return list(found)


def topological_order(graph: Graph) -> list[str]:
    """Prerequisites first; ties broken by id so the order is stable. Raises on a cycle."""
    remaining = {u: len({d for d in deps if d in graph and d != u}) for u, deps in graph.items()}
    ready = [u for u, n in remaining.items() if not n]
    heapq.heapify(ready)
    users = dependents(graph)
    order: list[str] = []
    while ready:
        unit = heapq.heappop(ready)
        order.append(unit)
        for user in users.get(unit, ()):
            remaining[user] -= 1
            if not remaining[user]:
                heapq.heappush(ready, user)
    if len(order) != len(graph):
        raise ValueError("graph has a cycle: " + ", ".join(sorted(set(graph) - set(order))))
    return order


def dependents(graph: Graph) -> dict[str, list[str]]:
    """Unit id -> the units that depend on it, sorted."""
    users: dict[str, set[str]] = {u: set() for u in graph}
    for unit, deps in graph.items():
        for dep in deps:
            if dep in users and dep != unit:
                users[dep].add(unit)
    return {u: sorted(v) for u, v in users.items()}


def downstream(
    graph: Graph, unit: str, users: Mapping[str, Sequence[str]] | None = None
) -> list[str]:
    """Every unit that depends on unit, directly or through others, sorted; `users` is
    dependents(graph) when the caller has it already (it costs the whole graph)."""
    return sorted(downstream_of(graph, [unit], users))


def downstream_of(
    graph: Graph, units: Iterable[str], users: Mapping[str, Sequence[str]] | None = None
) -> set[str]:
    """Every unit that depends on any of units, directly or through others, in one walk
    from all of them (each unit visited once, however many of them sit upstream)."""
    users = dependents(graph) if users is None else users
    seen: set[str] = set()
    stack = [user for unit in units for user in users.get(unit, ())]
    while stack:
        user = stack.pop()
        if user not in seen:
            seen.add(user)
            stack.extend(users.get(user, ()))
    return seen


def upstream(graph: Graph, unit: str) -> list[str]:
    """Every unit that unit depends on, directly or through others, sorted."""
    seen: set[str] = set()
    stack = list(graph.get(unit, ()))
    while stack:
        dep = stack.pop()
        if dep not in seen and dep != unit:
            seen.add(dep)
            stack.extend(graph.get(dep, ()))
    return sorted(seen)


def ready_units(graph: Graph, passed: Iterable[str], started: Iterable[str]) -> list[str]:
    """Units not yet started whose prerequisites have all passed."""
    done, begun = set(passed), set(started)
    return sorted(
        u for u, deps in graph.items() if u not in begun and all(d in done for d in deps)
    )


def levels(graph: Graph) -> dict[str, int]:
    """Dependency depth per unit: 1 for a unit with no dependencies."""
    depth: dict[str, int] = {}
    for unit in topological_order(graph):
        depth[unit] = 1 + max((depth[d] for d in graph[unit] if d in depth), default=0)
    return depth


def critical_path(graph: Graph, weights: Mapping[str, float]) -> tuple[float, list[str]]:
    """The heaviest chain of dependencies given per-unit weights: (length, units in order)."""
    best: dict[str, float] = {}
    before: dict[str, str | None] = {}  # unit -> the dependency its heaviest chain comes by
    for unit in topological_order(graph):
        prior = max((d for d in graph[unit] if d in best), key=best.__getitem__, default=None)
        best[unit] = (best[prior] if prior is not None else 0.0) + weights.get(unit, 0.0)
        before[unit] = prior
    if not best:
        return 0.0, []
    last = max(best, key=best.__getitem__)
    path = [last]
    while (prior := before[path[-1]]) is not None:
        path.append(prior)
    return best[last], path[::-1]
