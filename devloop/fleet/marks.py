"""Which decisions were made under the stub's scripted turns: the mark on the unit state,
and its copy in the folder.

The store keeps the model of the run driving the project ("stub", ...);
agent-state/scripted.json holds {"units": [...]}: the passed units a script passed (exported).
"""

from __future__ import annotations

import json

from devloop.store import RedisStore, UnitState
from devloop.store.protocols import ControlStore

STUB = "stub"
MARKS_FILE = "scripted.json"  # agent-state/scripted.json


def note_llm(store: ControlStore, pid: str, llm: str) -> None:
    """Remember the model of the run that drives the project now (its decisions are marked)."""
    store.set_run_llm(pid, llm)


def forget_llm(store: ControlStore, pid: str) -> None:
    """The model is not known (`devloop enqueue`: the workers' own): no decision is marked."""
    store.set_run_llm(pid, None)


def scripted_now(store: ControlStore, pid: str) -> bool:
    """Whether the run driving the project now serves the stub's scripted turns."""
    return store.run_llm(pid) == STUB


def is_scripted(state: UnitState, every_run_scripted: bool = False) -> bool:
    """A unit that passed under scripted turns (every_run_scripted: all runs of the project
    used the stub, so any pass did, marked or not: a state from before the mark existed)."""
    return state.status == "passed" and (state.scripted or every_run_scripted)


def export_marks(store: RedisStore, pid: str, every_run_scripted: bool = False) -> None:
    """Write agent-state/scripted.json from the unit states, so the folder remembers them."""
    units = [u.id for u in store.project_record(pid).units.units]
    states = store.get_states(pid, units)
    marked = [u for u, s in states.items() if is_scripted(s, every_run_scripted)]
    data = json.dumps({"units": marked}).encode()
    if store.agent_state_file(pid, MARKS_FILE) != data:
        store.put_agent_state(pid, MARKS_FILE, data)
