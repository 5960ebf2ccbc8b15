"""A unit's definition (spec.json, SDD section, upstream contracts) changed after it ran:
found by digest, and the unit run again as a retry with the change as its hint.

The store keeps each unit's Definition (JSON): what the unit was last run on.

`devloop run` and `devloop enqueue` record every unit's definition; the next one compares
the folder's with it. Imports by other commands (`sandbox exec`, `session run`) leave the
record alone, so an edit is noticed whichever command imported it first.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from devloop.core import dag
from devloop.core.loop import unblock
from devloop.fleet.dispatch import move, unblock_unit
from devloop.fleet.messages import Dispatch, StepMsg
from devloop.fleet.transition import followup
from devloop.project.load import Project
from devloop.store import RedisStore

SPEC, SDD = "spec.json", "SDD section"


class Definition(BaseModel):
    """Digests of what a unit is asked to do, and its acceptance criteria (for a diff)."""

    digests: dict[str, str]  # part ("spec.json", "SDD section", "contract of X") -> sha256
    acceptance: list[str] = []


@dataclass(frozen=True)
class Change:
    """A unit whose definition changed since it last ran, and how."""

    unit: str
    status: str
    reason: str  # what changed, in words; the coder's hint when the unit runs again
    upstream: bool = False  # only an upstream contract changed


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def definition(project: Project, unit: str) -> Definition:
    """The unit's definition as the folder holds it now."""
    spec = project.specs[unit]
    parts = {SPEC: _digest(spec.model_dump_json()), SDD: _digest(project.sections[unit].html)}
    entry = project.units.unit(unit)
    for dep in entry.depends_on if entry else []:
        contract = project.sdd_contracts.get(dep, {})
        parts[f"contract of {dep}"] = _digest(json.dumps(contract, sort_keys=True))
    return Definition(digests=parts, acceptance=list(spec.acceptance_criteria))


def _difference(old: Definition, new: Definition) -> tuple[str, bool]:
    """What changed between two definitions, in words; and whether only upstream did."""
    changed = [p for p in new.digests if old.digests.get(p) != new.digests[p]]
    own = [p for p in changed if p in (SPEC, SDD)]
    words = []
    if own:
        words.append(" and ".join(own) + " changed")
        added = [a for a in new.acceptance if a not in old.acceptance]
        removed = [a for a in old.acceptance if a not in new.acceptance]
        if added:
            words.append("acceptance criteria added: " + "; ".join(f'"{a}"' for a in added))
        if removed:
            words.append("removed: " + "; ".join(f'"{a}"' for a in removed))
    upstream = [p for p in changed if p not in (SPEC, SDD)]
    if upstream:
        words.append(", ".join(upstream) + " changed")
    return ", ".join(words), not own


def changes(store: RedisStore, project: Project) -> list[Change]:
    """Units whose definition differs from the one recorded when they last ran (a unit
    never recorded is not a change), in dependency order."""
    pid = project.pid
    recorded = {k: Definition.model_validate_json(v) for k, v in store.definitions(pid).items()}
    order = dag.topological_order(project.graph())
    states = store.get_states(pid, order)
    found = []
    for unit in order:
        old = recorded.get(unit)
        if old is None:
            continue
        new = definition(project, unit)
        if new.digests != old.digests:
            reason, upstream = _difference(old, new)
            found.append(Change(unit, states[unit].status, reason, upstream))
    return found


def record_definitions(store: RedisStore, project: Project) -> None:
    """Remember every unit's definition as the one it runs on from now."""
    mapping = {u.id: definition(project, u.id).model_dump_json() for u in project.units.units}
    store.record_definitions(project.pid, mapping)


def rerun(store: RedisStore, pid: str, unit: str, why: str) -> list[Dispatch]:
    """Run a passed or blocked unit again as a fresh retry attempt with `why` as its hint;
    [] when the unit is anywhere else (it has not run yet, or it is running)."""
    state = store.get_state(pid, unit)
    if state.status == "blocked":
        return unblock_unit(store, pid, unit, why)
    if state.status != "passed":
        return []
    new = unblock(state, why).model_copy(update={"updated_at": time.time()})
    if move(store, pid, unit, state, new, "loop_retry_coder", f"run-{new.attempt}-1",
            f"run again: {why}", followup("retry_coder", new)) is None:
        return []
    return [Dispatch(msg=StepMsg(pid=pid, unit_id=unit, attempt=new.attempt, mode="retry"))]


def apply_changes(
    store: RedisStore, project: Project, folder: str, asked: Sequence[str] = ()
) -> tuple[list[Dispatch], list[str]]:
    """Run again the units asked for (`--rerun`) and the passed units whose definition
    changed; the chains to send and one line per unit saying what was done or how to."""
    pid, graph = project.pid, project.graph()
    users = dag.dependents(graph)
    below: dict[str, set[str]] = {}  # a unit run again -> everything downstream of it
    sent: list[Dispatch] = []
    lines: list[str] = []
    running: set[str] = set()

    def start(unit: str, why: str, label: str) -> None:
        chains = rerun(store, pid, unit, why)
        if chains:
            sent.extend(chains)
            running.add(unit)
            lines.append(f"{unit}: {label}; running it again as attempt {chains[0].msg.attempt}")
        else:
            status = store.get_state(pid, unit).status
            lines.append(f"{unit}: {label}; not run again: it is {status} (only a passed or "
                         "blocked unit runs again)")

    for unit in asked:
        start(unit, "a person asked for this unit to run again (`devloop run --rerun`)",
              "asked for with --rerun")
    for change in changes(store, project):
        if change.unit in running:
            continue
        for unit in running - below.keys():
            below[unit] = set(dag.downstream(graph, unit, users))
        behind = sorted(r for r in running if change.unit in below[r])
        fix = f"`devloop run {folder} --rerun {change.unit}`"
        if change.status == "passed" and not behind:
            start(change.unit, f"{change.reason} since this unit passed", change.reason)
        elif change.status in ("passed", "blocked"):
            after = f" once {', '.join(behind)} passed again" if behind else ""
            # A blocked unit's kept conversation and attempts may not carry the edit: it
            # can also start over on the new spec.
            over = (f", or to start it over on it: `devloop reset {folder} {change.unit}`"
                    if change.status == "blocked" else "")
            lines.append(f"{change.unit}: {change.reason}; to run it again{after}: {fix}{over}")
        else:
            lines.append(f"{change.unit}: {change.reason}; its next attempt works from it")
    record_definitions(store, project)
    return sent, lines
