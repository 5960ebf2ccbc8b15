"""`devloop reset`: which units start over, and what a person is told before saying yes.

A reset unit goes back to pending at attempt 0, as if it had never run: its code, tests,
runs, contract.json, coder.log, sessions, attempt history and agent state go; its spec
(units.json, the SDD, spec.json) stays, and so do the ledgers' records (bugs.ndjson and
timeline.ndjson are append-only: the reset is an event in the timeline) and the spend.

Every unit downstream of a reset unit that has moved (ran, or waits blocked behind it)
starts over too. Its code was built, and its tests were run, against the code the reset
takes away: kept as passed it would claim a program that no longer exists (`assemble`, the
report), and it could not run again until the reset unit passed anyway. Starting it over
keeps the rule every run relies on: a passed unit's dependencies have passed, and it was
tested against their passed code. A downstream unit that never ran only waits for the
reset unit again. Pure: the effects are in devloop.fleet.wipe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from devloop.core import dag
from devloop.fleet.marks import is_scripted
from devloop.store import UnitState

KEPT = ("kept: units.json, the SDD, each spec.json and stub.yaml; bugs.ndjson and "
        "timeline.ndjson keep their history (each reset unit gets a unit_reset event); the "
        "spend stays counted")


@dataclass(frozen=True)
class ResetPlan:
    """The units that start over, in dependency order, and why the ones not asked for do."""

    units: tuple[str, ...]
    # A unit not asked for -> the asked units upstream of it (it was built on their code).
    because: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def moved(state: UnitState) -> bool:
    """Whether a unit has anything to start over: it ran, or waits blocked upstream."""
    return state.attempt > 0 or state.status != "pending"


def plan_reset(
    graph: dag.Graph, states: Mapping[str, UnitState], asked: Sequence[str] = ()
) -> ResetPlan:
    """The units asked for (every unit when none is), and every unit downstream of one of
    them that has moved."""
    order = dag.topological_order(graph)
    chosen = set(asked) if asked else set(order)
    picked = [u for u in order if u in chosen]
    users = dag.dependents(graph)
    # Every unit is chosen when none is asked for: then nothing is reset "because".
    below = {unit: set(dag.downstream(graph, unit, users)) for unit in picked} if asked else {}
    because: dict[str, tuple[str, ...]] = {}
    for unit in order:
        if unit in chosen or not moved(states.get(unit, UnitState())):
            continue
        ups = tuple(u for u in picked if unit in below[u])
        if ups:
            because[unit] = ups
    return ResetPlan(tuple(u for u in order if u in chosen or u in because), because)


def where(state: UnitState) -> str:
    """`passed (scripted) at attempt 2`, `blocked at attempt 5`, `pending, never ran`."""
    if not moved(state):
        return "pending, never ran"
    status = f"{state.status} (scripted)" if is_scripted(state) else state.status
    return f"{status} at attempt {state.attempt}"


def told(plan: ResetPlan, states: Mapping[str, UnitState]) -> list[str]:
    """One line per unit saying where it is and why it starts over, then what is kept."""
    lines = []
    for unit in plan.units:
        now = where(states.get(unit, UnitState()))
        ups = plan.because.get(unit)
        if ups:
            names = ", ".join(ups)
            lines.append(f"{unit}: {now}; starts over too: it depends on {names}, and its code "
                         f"was built and tested against the code {names} loses")
        else:
            lines.append(f"{unit}: {now}; starts over: its code, tests, runs, contract.json, "
                         "coder.log, sessions and attempts go")
    return [*lines, KEPT]


def question(plan: ResetPlan, pid: str) -> str:
    """`Reset 2 units of p-shop (money, cart)? [y/N] `."""
    n = len(plan.units)
    return f"Reset {n} unit{'s' if n != 1 else ''} of {pid} ({', '.join(plan.units)})? [y/N] "


def agreed(answer: str | None) -> bool:
    """Whether a typed answer says yes (nothing typed, or end of input, is no)."""
    return (answer or "").strip().lower() in ("y", "yes")
