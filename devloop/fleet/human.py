"""What people do to a running project, and what needs them: the units waiting for a person
(blocked, or in review), cancels, resuming, and a new spec with a retry.

Every action returns the chains to send (or the task ids to revoke): sending them is the
caller's (`workers/`, the console's callbacks), so nothing here touches Celery.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from devloop.core.loop import awaited_tester_try
from devloop.core.models import UnitSpec
from devloop.fleet.control import (
    bump_epoch,
    clear_pause,
    current_epoch,
    mark_unit_cancelled,
    pause,
)
from devloop.fleet.dispatch import (
    ACTIVE,
    CANCELLED,
    TERMINAL,
    move,
    reconcile,
    resume_blocked,
    unblock_unit,
)
from devloop.fleet.messages import Dispatch, StepMsg
from devloop.fleet.records import StepRecord, steps_of
from devloop.fleet.review import ReviewRefused, request_changes_unit
from devloop.fleet.transition import followup
from devloop.fleet.why import blocked_words
from devloop.ledgers import Timeline
from devloop.store import RedisStore, UnitState

HUMAN = ("blocked", "review")
CRITERION_CHARS = 1000
MAX_CRITERIA = 50


@dataclass(frozen=True)
class HumanCall:
    """A unit that waits for a person: why, and what its tests said last."""

    unit: str
    status: str  # blocked | review
    attempt: int
    reason: str
    last_failure: dict[str, Any] | None
    hint: str | None
    since: float | None


def needs_human(store: RedisStore, pid: str) -> list[HumanCall]:
    """Every blocked unit, then every unit awaiting review, in units.json order."""
    units = [u.id for u in store.project_record(pid).units.units]
    return sorted(human_calls(store, pid, units), key=lambda c: HUMAN.index(c.status))


def human_calls(store: RedisStore, pid: str, units: list[str]) -> list[HumanCall]:
    """The calls of those of units that wait for a person, in their order (reading only
    their keys: the console updates its list per change)."""
    states = store.get_states(pid, units)
    waiting = [u for u in units if states[u].status in HUMAN]
    steps = steps_of(store, pid, waiting)
    return [call_for(u, states[u], _last_tester_output(steps[u]), steps[u]) for u in waiting]


def human_call(store: RedisStore, pid: str, unit: str) -> HumanCall:
    """The call for one unit, as it stands now."""
    state = store.get_state(pid, unit)
    steps = steps_of(store, pid, [unit])[unit]
    return call_for(unit, state, _last_tester_output(steps), steps)


def call_for(
    unit: str, state: UnitState, tester: dict[str, Any] | None,
    steps: Sequence[StepRecord] = (),
) -> HumanCall:
    """A HumanCall from a unit's state, its last tester output and its step records (a
    block's reason names the failures that led to it)."""
    failures = (tester or {}).get("failures") or []
    first = failures[0] if failures and isinstance(failures[0], dict) else None
    last = {k: first.get(k) for k in ("test", "expected", "got", "hint")} if first else None
    if state.status == "review":
        reason = "tests green; waiting for a person's review"
    else:
        reason = blocked_words(state, steps)
    hint = state.last_hint or (last or {}).get("hint")
    return HumanCall(unit, state.status, state.attempt, reason, last, hint, state.updated_at)


def _last_tester_output(records: list[Any]) -> dict[str, Any] | None:
    testers = [r for r in records if r.role == "tester"]
    return testers[-1].output if testers else None


def queued_task_ids(store: RedisStore, pid: str, units: list[str] | None = None) -> list[str]:
    """The task ids a chain of each moving unit (or of `units`) would have now: what a
    cancel revokes."""
    names = units if units is not None else [u.id for u in store.project_record(pid).units.units]
    epoch = current_epoch(store, pid)
    ids: list[str] = []
    for unit, state in store.get_states(pid, names).items():
        if state.status not in ACTIVE:
            continue
        for tester_try in sorted({1, awaited_tester_try(state)}):
            msg = StepMsg(pid=pid, unit_id=unit, attempt=state.attempt, tester_try=tester_try,
                          epoch=epoch)
            ids += [msg.task_id(role) for role in ("coder", "tester", "decide")]
    return list(dict.fromkeys(ids))


def cancel_project(store: RedisStore, pid: str, by: str) -> list[str]:
    """Pause the project as cancelled: no new session starts, running ones stop before their
    next turn (checkpoints kept); returns the queued task ids to revoke."""
    revoke = queued_task_ids(store, pid)
    if pause(store, pid, "cancelled"):
        Timeline(store.sink(pid, "timeline")).append(
            "project_cancelled", agent="human", summary=f"cancelled by {by}")
    bump_epoch(store, pid)  # chains sent after a resume get ids this revoke never named
    return revoke


def cancel_unit(store: RedisStore, pid: str, unit: str, by: str) -> list[str]:
    """Stop one unit: its session stops before its next turn (checkpoint kept) and the unit
    is blocked as cancelled until `devloop unblock` (or resume); the task ids to revoke."""
    state = store.get_state(pid, unit)
    if state.status in TERMINAL:
        raise ValueError(f'unit "{unit}" is {state.status}; there is nothing to cancel')
    revoke = queued_task_ids(store, pid, [unit])
    mark_unit_cancelled(store, pid, unit, True)
    blocked = state.model_copy(update={
        "status": "blocked", "blocked_reason": f"cancelled by {by}", "updated_at": time.time(),
        "extra": {**state.extra, "block_kind": CANCELLED},
    })
    if move(store, pid, unit, state, blocked, "loop_block", summary=f"cancelled by {by}",
            then=followup("block", blocked)) is None:
        mark_unit_cancelled(store, pid, unit, False)
        raise ValueError(f'unit "{unit}" changed while it was being cancelled; try again')
    bump_epoch(store, pid)
    return revoke


def resume_project(store: RedisStore, pid: str, max_usd: float | None) -> list[Dispatch]:
    """Lift a pause or cancel (with a new cap, if given) and re-send what was moving, from
    its checkpoints; units a person cancelled one by one resume too."""
    clear_pause(store, pid, max_usd)
    return resume_blocked(store, pid, kinds=(CANCELLED,)) + reconcile(store, pid, 0)


def retry_with_spec(
    store: RedisStore, pid: str, unit: str, criteria: list[str], note: str, by: str
) -> list[Dispatch]:
    """New acceptance criteria for a blocked unit or one in review, then a fresh coder
    attempt told what changed; the chains to send."""
    criteria = [c.strip()[:CRITERION_CHARS] for c in criteria if c.strip()][:MAX_CRITERIA]
    if not criteria:
        raise ValueError("give at least one acceptance criterion (one per line)")
    state = store.get_state(pid, unit)
    if state.status not in HUMAN:
        raise ValueError(f'unit "{unit}" is {state.status}; edit a blocked unit or one in '
                         "review")
    _write_spec(store, pid, unit, criteria)
    told = (note.strip() + "\n" if note.strip() else "") + (
        f"{by} changed the acceptance criteria:\n" + "\n".join(f"- {c}" for c in criteria))
    Timeline(store.sink(pid, "timeline")).append(
        "spec_edited", unit_id=unit, agent="human", summary=f"acceptance criteria edited by {by}")
    if state.status == "review":
        try:
            return request_changes_unit(store, pid, unit, told, by)
        except ReviewRefused as exc:
            raise ValueError(str(exc)) from exc
    return unblock_unit(store, pid, unit, told)


def _write_spec(store: RedisStore, pid: str, unit: str, criteria: list[str]) -> None:
    """spec.json with the new criteria, in the specs record and in the unit's files."""
    old = store.unit_spec(pid, unit)
    entry = store.project_record(pid).units.unit(unit)
    if old is None and entry is None:
        raise ValueError(f'no unit "{unit}" in this project')
    base = old or UnitSpec(unit_id=unit, kind=entry.kind if entry else "lib",
                           depends_on=list(entry.depends_on) if entry else [])
    spec = base.model_copy(update={"acceptance_criteria": criteria})
    text = json.dumps(spec.to_json_dict(), indent=2, ensure_ascii=False) + "\n"
    for _ in range(5):  # a commit racing a worker's: read the version again
        version = store.unit_files(pid, unit).version
        done = store.commit_files(pid, unit, role="spec", attempt=_spec_edit(store, pid, unit),
                                  base_version=version, changes={"spec.json": text.encode()})
        if done.applied:
            # The specs record follows the file it was committed with, never ahead of it.
            store.put_unit_spec(pid, unit, spec)
            return
    raise ValueError(f'unit "{unit}" kept changing; try again')


def _spec_edit(store: RedisStore, pid: str, unit: str) -> int:
    """A fresh number for each spec edit (a commit's marker is role:attempt, once)."""
    return store.count_spec_edit(pid, unit)
