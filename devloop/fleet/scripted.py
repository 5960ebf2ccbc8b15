"""Units that passed under the stub's scripted turns are run again by a real model.

A scripted green proves the script, not the code: the stand-in code the scaffold writes
returns 0 and the scripted tests accept it. The unit state carries the mark (`scripted`,
set by the decision of a run under `--llm stub`); `devloop run` with a real model runs
those units again from `implement`, and the passed units built on them too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from devloop.core import dag
from devloop.core.loop import waiting_again
from devloop.fleet.control import current_epoch
from devloop.fleet.dispatch import start_units_again
from devloop.fleet.marks import export_marks, is_scripted
from devloop.fleet.messages import Dispatch
from devloop.fleet.transition import transition
from devloop.project.load import Project
from devloop.store import RedisStore, UnitState

WHY = "passed under scripted turns (--llm stub)"
ROLES = ("coder", "tester")  # their conversations start afresh: no scripted turn in them


@dataclass(frozen=True)
class Rerun:
    """A passed unit a real model runs again from implement, and why."""

    unit: str
    built_on: tuple[str, ...] = ()  # not scripted itself: the scripted units upstream of it
    waits_for: tuple[str, ...] = ()  # units it depends on that run again first

    def line(self, attempt: int) -> str:
        """The one line `devloop run` says about it."""
        why = f"built on {', '.join(self.built_on)}, which {WHY}" if self.built_on else WHY
        when = (f"once {', '.join(self.waits_for)} "
                f"pass{'es' if len(self.waits_for) == 1 else ''}" if self.waits_for
                else f"as attempt {attempt}")
        return f"{self.unit}: {why}; running it with the model from implement {when}"


def reruns(
    graph: dag.Graph, states: Mapping[str, UnitState], every_run_scripted: bool = False
) -> list[Rerun]:
    """The units a run with a real model runs again, in dependency order: every unit that
    passed under scripted turns, and every passed unit downstream of one. Pure."""
    order = dag.topological_order(graph)
    marked = {u for u in order if is_scripted(states[u], every_run_scripted)}
    below = dag.downstream_of(graph, marked)
    again = marked | {d for d in below if states[d].status == "passed"}
    out = []
    for unit in (u for u in order if u in again):
        upstream = () if unit in marked else tuple(
            m for m in dag.upstream(graph, unit) if m in marked)
        out.append(Rerun(unit, upstream, tuple(sorted(d for d in graph[unit] if d in again))))
    return out


def _forget(store: RedisStore, pid: str, graph: dag.Graph, unit: str) -> None:
    """Drop the unit's scripted conversations and its release records, so it starts afresh
    and is released again (exactly once) when what it depends on passes again."""
    store.forget_runs(pid, unit, ROLES, dag.dependents(graph).get(unit, []))


@dataclass
class Rebuilt:
    """What run_scripted_again did: the chains to send, one line per unit, those units."""

    sent: list[Dispatch] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)


def run_scripted_again(
    store: RedisStore, project: Project, every_run_scripted: bool = False
) -> Rebuilt:
    """A run with a real model: every scripted pass (and what passed on top of it) runs
    again from implement; the chains to send, and one line per unit saying why."""
    pid, graph = project.pid, project.graph()
    states = store.get_states(pid, list(graph))
    epoch = current_epoch(store, pid)
    done = Rebuilt()
    for rerun in reruns(graph, states, every_run_scripted):
        state = states[rerun.unit]
        waiting = waiting_again(state).model_copy(update={"updated_at": time.time()})
        line = rerun.line(state.attempt + 1)
        if not transition(store, pid, rerun.unit, state, waiting, "loop_retry_coder",
                          f"run-{state.attempt + 1}-1", line.split(": ", 1)[1]):
            continue  # moved meanwhile (another run drives it): it is not passed any more
        _forget(store, pid, graph, rerun.unit)
        if not rerun.waits_for:
            done.sent += start_units_again(store, pid, [rerun.unit], epoch)
        done.lines.append(line)
        done.units.append(rerun.unit)
    export_marks(store, pid)
    return done
