"""A unit's transition: its new state, the loop's event and what must follow, in one step.

The loop's timeline event (loop_pass, loop_block, ...) is what the report believes, and a
pass or a block has effects beyond the unit (dependents released or blocked, notes
promoted, bugs moved to fixing). A worker can die at any line, and Redis can lose a reply,
so the state change, its event, its step record and the follow-up still to do land in one
Lua call (store.scripts.CAS_STATE). The follow-up's parts are idempotent: whoever made the
transition does them and drops the follow-up (fleet.dispatch.follow_up); reconcile does
one left overdue by a worker that died (fleet.dispatch.overdue_followups).
"""

from __future__ import annotations

import time
from typing import Literal, cast, get_args

from pydantic import BaseModel, ConfigDict

from devloop.fleet.records import StepRecord, field
from devloop.ledgers.timeline import loop_line
from devloop.store import RedisStore, UnitState
from devloop.store.state import WithState

Action = Literal["pass", "block", "retry_coder"]


class Followup(BaseModel):
    """What a transition still has to do after the state changed (a pass: promote the
    notes, export the marks, release the dependents; a block: block the downstream; a coder
    retry: move the open bugs to fixing), and the state it applies to."""

    model_config = ConfigDict(extra="forbid")

    action: Action
    status: str  # the state the transition made: an overdue follow-up of a unit that moved
    attempt: int  # on since (a person unblocked it, it ran again) is dropped, not done
    epoch: int = 0
    scripted: bool = False  # a pass to or from scripted turns: the marks change
    at: float  # when it was committed, or last claimed by a reconcile pass


def followup(
    action: str, new: UnitState, epoch: int = 0, marks: bool = False
) -> Followup | None:
    """The follow-up a transition to `new` by `action` leaves, if it has one (`marks`: a
    pass to or from scripted turns exports the folder's marks again)."""
    if action not in get_args(Action):
        return None  # a tester retry, a review wait: nothing beyond the unit
    return Followup(action=cast(Action, action), status=new.status, attempt=new.attempt,
                    epoch=epoch, scripted=marks, at=time.time())


def transition(
    store: RedisStore, pid: str, unit: str, old: UnitState, new: UnitState, kind: str,
    ref: str | None = None, summary: str = "", then: Followup | None = None,
    record: StepRecord | None = None,
) -> bool:
    """Move the unit from old's (status, attempt) to new with its loop event `kind`, the
    follow-up `then` and the step record, all in one step or none; whether it moved."""
    with_it = WithState(
        timeline_line=loop_line(kind, unit, ref, summary),
        followup=then.model_dump_json() if then else "",
        record=(field(record.role, record.attempt, record.tester_try),
                record.model_dump_json()) if record else None,
    )
    return store.cas_state(pid, unit, old.status, old.attempt, new, with_it=with_it)
