"""What a reset takes away, from Redis and from the project folder, so the two agree.

devloop.fleet.reset decides which units start over; this carries it out. In Redis: the
unit's state (pending at attempt 0), its role-written files (a commit, so the version
moves on), commit markers, step records, passed copy, release records, review copies,
sessions (coder, tester, reassess), leases, live output, progress, recorded definition,
cancel flag, agent state and pending memory notes; each unit gets a `unit_reset` timeline
event, and the epoch moves on so no chain sent before names a task id sent after. In the
folder: the same files, agent state and notes, then one export as `devloop run` ends with,
which also marks what the folder holds as DevLoop's (the next import sees no edit).
The tokens and dollars a unit spent stay counted (its state keeps them, as the spend
ledger does).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from devloop.core import dag
from devloop.core.models import MUTATION_FILE
from devloop.fleet.control import bump_epoch, export_spend
from devloop.fleet.marks import export_marks
from devloop.fleet.records import export_steps
from devloop.ledgers import Timeline
from devloop.roles.context import handoff_path, reviews_path
from devloop.roles.services import ROLE_STATE_TAILS, role_state_name
from devloop.roles.tester import checked_path
from devloop.roles.verify import baseline_path
from devloop.safe.safedir import Dir
from devloop.safe.safetree import remove_tree
from devloop.store import RedisStore, UnitState
from devloop.store.project import pending_prefix
from devloop.store.snapshot import AGENT_STATE_DIR, MEMORY_DIR
from devloop.store.synclock import folder_synced

ROLE_DIRS = ("code", "tests", "runs")  # under units/{id}/: what the coder and tester write
ROLE_FILES = ("contract.json", "coder.log")
ROLES = ("coder", "tester")
MEMORY_ROLES = ("coder", "tester", "reassess")


def role_written(path: str) -> bool:
    """Whether a unit-relative path is one the roles write (code/**, tests/**, runs/**,
    contract.json, coder.log), not the spec."""
    return path in ROLE_FILES or path.split("/", 1)[0] in ROLE_DIRS


def agent_state_names(unit: str) -> list[str]:
    """The unit's files under agent-state/: todolists, runtime state and closing summaries
    per role (see RoleServices), the coder's baseline, the tester's checked tests, its
    reviews."""
    names = [role_state_name(role, unit, tail) for role in ROLES for tail in ROLE_STATE_TAILS]
    handoffs = [handoff_path(unit, role) for role in ROLES]
    return [*names, *handoffs, baseline_path(unit), checked_path(unit), reviews_path(unit)]


def live_steps(store: RedisStore, pid: str, units: Sequence[str]) -> dict[str, str]:
    """The units a worker runs a step of now (a lease is held): unit -> which step."""
    busy = {}
    for unit in units:
        held = store.unit_leases(pid, unit)
        if held:
            attempt, role = held[0]
            busy[unit] = f"its {role} step of attempt {attempt} is running"
    return busy


def reset_in_store(store: RedisStore, pid: str, graph: dag.Graph, units: Sequence[str],
                   by: str) -> None:
    """Start each unit over in Redis: pending at attempt 0, nothing of its runs kept."""
    users = dag.dependents(graph)
    timeline = Timeline(store.sink(pid, "timeline"))
    states = store.get_states(pid, list(units))
    for unit in units:
        _drop_role_files(store, pid, unit)
        store.wipe_unit_runs(pid, unit, users=users.get(unit, []),
                             agent_state=agent_state_names(unit),
                             note_prefixes=[pending_prefix(r, unit) for r in MEMORY_ROLES])
        was = states[unit]
        # What it spent stays counted, as the spend ledger keeps it.
        store.put_state(pid, unit, UnitState(tokens=was.tokens, cost_usd=was.cost_usd))
        timeline.append("unit_reset", unit_id=unit, agent="human",
                        summary=f"started over by {by} (was {was.status} at attempt "
                                f"{was.attempt}): its code, tests, runs and attempts removed")
    _drop_mutation_scores(store, pid, units)
    bump_epoch(store, pid)
    export_marks(store, pid)


def _drop_role_files(store: RedisStore, pid: str, unit: str) -> None:
    """Remove the role-written files as one commit (the version moves on, as for any)."""
    for _ in range(5):  # nothing else should commit now (no run is live); a race goes again
        files = store.unit_files(pid, unit)
        gone: dict[str, bytes | None] = {p: None for p in files.files if role_written(p)}
        if not gone:
            return
        marker = store.next_reset_marker(pid, unit)
        if store.commit_files(pid, unit, role="reset", attempt=marker,
                              base_version=files.version, changes=gone).applied:
            return
    raise RuntimeError(f'unit "{unit}" kept changing while it was being reset; try again')


def _drop_mutation_scores(store: RedisStore, pid: str, units: Sequence[str]) -> None:
    """The reset units' mutation scores measured their old code: out of Redis's copy."""
    name = MUTATION_FILE.removeprefix(AGENT_STATE_DIR + "/")
    raw = store.agent_state_file(pid, name)
    kept = _without(raw, units)
    if kept is not None:
        store.put_agent_state(pid, name, kept)


def _without(raw: bytes | None, units: Sequence[str]) -> bytes | None:
    """mutation.json without the units' scores, or None when it has none of them."""
    try:
        data = json.loads(raw or b"")
    except ValueError:
        return None
    if not isinstance(data, dict) or not any(u in data for u in units):
        return None
    return (json.dumps({k: v for k, v in data.items() if k not in units}, indent=2)
            + "\n").encode()


def reset_in_folder(store: RedisStore, pid: str, folder: Path, units: Sequence[str]) -> None:
    """Remove the units' role-written files, agent state and pending notes from the folder,
    then export the project into it as a run does when it ends."""
    with folder_synced(folder), Dir.open(folder.resolve()) as root:
        for unit in units:
            doomed = [f"units/{unit}/{name}" for name in (*ROLE_DIRS, *ROLE_FILES)]
            doomed += [f"{AGENT_STATE_DIR}/{name}" for name in agent_state_names(unit)]
            doomed += [f"{MEMORY_DIR}/{pending_prefix(r, unit)}".rstrip("/")
                       for r in MEMORY_ROLES]
            for rel in doomed:
                if root.exists(rel):
                    remove_tree(root, rel)
        if root.is_file(MUTATION_FILE):
            kept = _without(root.read_bytes(MUTATION_FILE), units)
            if kept is not None:
                root.write_atomic(MUTATION_FILE, kept, 0o644)
    store.export(pid, folder, as_source=True)
    export_steps(store, pid, folder)
    export_spend(store, pid, folder)
