"""Where chains come from: enqueueing a project, deciding after a test run, releasing
dependents exactly once, unblocking, and reconciling units that lost their task."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from devloop.core import dag
from devloop.core.loop import (
    STARVED_BACKOFF_S,
    TESTER_RETRIES,
    Decision,
    awaited_tester_try,
    coder_mode,
    decide,
    recovered,
    review_required,
    started_again,
    unblock,
)
from devloop.fleet.control import current_epoch, mark_unit_cancelled
from devloop.fleet.marks import export_marks, scripted_now
from devloop.fleet.messages import Dispatch, StepMsg
from devloop.fleet.records import StepRecord, load_outcomes, load_step
from devloop.fleet.retest import passed_again
from devloop.fleet.transition import Followup, followup, transition
from devloop.ledgers import BugLedger
from devloop.ledgers.timeline import loop_line
from devloop.project.load import load_project
from devloop.runners.tamper import is_code_fault
from devloop.store import ImportReport, RedisStore, UnitState, promote_memory

ACTIVE = ("coding", "testing", "waiting_model")
# No step of the unit's attempt may run any more (review: a person decides next).
TERMINAL = ("passed", "blocked", "blocked_upstream", "review")
# Blocks that are not the code's fault: the next `devloop run` resumes them.
RESUMABLE = ("model", "infrastructure")
CANCELLED = "cancelled"  # a person stopped the unit: `devloop unblock` or resume carries it on
CASCADE_TRIES = 3  # reads of a cascade's units that moved while it wrote
RELEASED = "released: every unit it depends on passed"


def _start_all(store: RedisStore, pid: str, units: list[str], epoch: int) -> list[Dispatch]:
    """Start each released unit still pending (coding, attempt 1) and return its first chain.

    A compare-and-set from pending, so a release and a reconcile racing for one unit start
    it once (one `loop_release` event). A pending unit that ran before (a scripted pass a
    real model builds again) starts its next attempt instead, from implement too."""
    now = time.time()
    states = store.get_states(pid, units)
    first = [u for u in units if states[u].attempt == 0]
    state = UnitState(status="coding", attempt=1, started_at=now, updated_at=now)
    lines = {u: loop_line("loop_release", u, summary=RELEASED) for u in first}
    won = dict.fromkeys(store.start_units(pid, first, state, lines), 1)
    for unit in units:
        old = states[unit]
        if old.attempt and old.status == "pending":
            again = started_again(old, now)
            if transition(store, pid, unit, old, again, "loop_release", summary=RELEASED):
                won[unit] = again.attempt
    return [Dispatch(msg=StepMsg(pid=pid, unit_id=u, attempt=won[u], mode="implement",
                                 epoch=epoch))
            for u in units if u in won]


def start_units_again(store: RedisStore, pid: str, units: list[str], epoch: int) -> list[Dispatch]:
    """Start pending units now (their dependencies passed) and return their chains."""
    store.mark_dispatched(pid, units, "again")
    return _start_all(store, pid, units, epoch)


def enqueue_project(store: RedisStore, project_dir: Path) -> tuple[ImportReport, list[Dispatch]]:
    """Validate and import a project; release its roots (once: a second enqueue resumes)."""
    project = load_project(project_dir)  # raises ProjectInvalid before anything is written
    report = store.import_project(project)
    # A new enqueue is a new try of the environment (its problem may have been fixed).
    store.set_environment_error(project.pid, None)
    dispatches = []
    epoch = current_epoch(store, project.pid)
    for unit, deps in project.graph().items():
        if not deps and store.claim_root(project.pid, unit):
            dispatches += _start_all(store, project.pid, [unit], epoch)
    return report, dispatches


def release_dependents(store: RedisStore, pid: str, unit: str, epoch: int = 0) -> list[Dispatch]:
    """Record that unit passed; start each dependent whose dependencies have all passed."""
    record = store.project_record(pid)
    graph = record.graph
    users = record.dependents.get(unit, [])
    won = store.claim_releases(pid, unit, {user: len(graph[user]) for user in users})
    return _start_all(store, pid, won, epoch)


def decide_after(
    store: RedisStore, msg: StepMsg, budget: int, worker: str = "local",
    starved_backoff_s: float = STARVED_BACKOFF_S,
) -> list[Dispatch]:
    """Apply the red/green decision to a finished chain; return the chains to send next.

    The outcome comes from the coder and tester records of msg's attempt and try, which
    the workers that ran them stored; the message only names them.
    """
    pid, unit = msg.pid, msg.unit_id
    state, coder, tester = load_outcomes(store, msg)
    if state.attempt != msg.attempt or state.status not in ACTIVE or msg.tester_try != _try(state):
        return []  # decided already (a duplicate chain) or superseded
    if coder is None or tester is None or coder.outcome is None or tester.outcome is None:
        return []  # those steps never finished: nothing to decide (an early or forged message)
    made, tested = coder.outcome, tester.outcome
    if tested.crashed and "code_fault" not in tested.model_fields_set:
        # A record stored before steps recorded whose fault a crash is: judge it here.
        tested = tested.model_copy(update={"code_fault": is_code_fault(tested.crash_reason)})
    started = time.time()
    decision = decide(state, made, tested, budget=budget, starved_backoff_s=starved_backoff_s)
    if decision.action == "pass" and needs_review(store, pid, unit):
        decision = decide(state, made, tested, budget=budget, review=True)
    # A decision under the stub's scripted turns marks the unit: its pass proves the script.
    new = decision.state.model_copy(update={"updated_at": started,
                                            "scripted": scripted_now(store, pid)})
    # Before the pass is visible: a run never sees every unit done between the pass and
    # the re-tests it starts (passed_again starts them once, whichever decide gets here).
    again = passed_again(store, pid, unit, msg.epoch) if decision.action == "pass" else []
    record = StepRecord(
        role="decide",
        attempt=msg.attempt,
        tester_try=msg.tester_try,
        msg=msg,
        worker=worker,
        sent_at=msg.sent_at,
        started_at=started,
        ended_at=time.time(),
        status=decision.action,
        output={"reason": decision.reason, **_block_kind(decision)},
    )
    then = followup(decision.action, new, msg.epoch, marks=bool(new.scripted or state.scripted))
    out = move(store, pid, unit, state, new, f"loop_{decision.action}", msg.run_id,
               decision.reason, then, record)
    if out is None:
        return again
    if decision.action == "pass":
        return out + again
    if decision.action == "retry_coder":
        return [Dispatch(msg=StepMsg(pid=pid, unit_id=unit, attempt=new.attempt, mode="retry",
                                     epoch=msg.epoch))]
    if decision.action == "retry_tester":
        nxt = StepMsg(
            pid=pid, unit_id=unit, attempt=msg.attempt, mode=msg.mode,
            tester_try=_try(new), skip_coder=True, epoch=msg.epoch,
        )
        return [Dispatch(msg=nxt, countdown_s=decision.delay_s)]
    return []  # a review (a person approves, or not) or a block


def move(
    store: RedisStore, pid: str, unit: str, old: UnitState, new: UnitState, kind: str,
    ref: str | None = None, summary: str = "", then: Followup | None = None,
    record: StepRecord | None = None,
) -> list[Dispatch] | None:
    """transition() and, once it took, the follow-up it left: the chains that sends, or None
    if the unit had moved on (nothing changed)."""
    if not transition(store, pid, unit, old, new, kind, ref, summary, then, record):
        return None
    return follow_up(store, pid, unit, then) if then else []


def follow_up(store: RedisStore, pid: str, unit: str, then: Followup) -> list[Dispatch]:
    """Do what a transition left to do (each part idempotent), then drop it unless a newer
    transition replaced it; the chains to send (a pass's released dependents)."""
    out: list[Dispatch] = []
    if then.action == "pass":
        promote_memory(store, pid, unit)
        if then.scripted:
            export_marks(store, pid)
        out = release_dependents(store, pid, unit, then.epoch)
    elif then.action == "block":
        block_downstream(store, pid, unit)
    else:
        start_fixing(store, pid, unit, then.attempt)
    store.swap_followup(pid, unit, then.model_dump_json())
    return out


def overdue_followups(
    store: RedisStore, pid: str, grace_s: float, now: float | None = None
) -> list[Dispatch]:
    """Follow-ups left longer than grace_s (their worker died after the transition): each
    claimed by one caller, done if the unit is still where its transition put it, dropped
    if it moved on since; the chains to send."""
    now = now or time.time()
    out: list[Dispatch] = []
    left = store.followups(pid)
    states = store.get_states(pid, list(left)) if left else {}
    for unit, held in left.items():
        try:
            then = Followup.model_validate_json(held)
        except ValidationError:
            store.swap_followup(pid, unit, held)  # not DevLoop's (written by hand): dropped
            continue
        if now - then.at < grace_s:
            continue
        state = states[unit]
        if (state.status, state.attempt) != (then.status, then.attempt):
            store.swap_followup(pid, unit, held)
            continue
        claimed = then.model_copy(update={"at": now})
        # Claimed for another grace period: a caller that dies now leaves it to the next.
        if store.swap_followup(pid, unit, held, claimed.model_dump_json()):
            out += follow_up(store, pid, unit, claimed)
    return out


def _block_kind(decision: Decision) -> dict[str, str]:
    """A block's kind (the tester's, ...) for the decide record: a folder's report tells a
    block by the code's failures from the others by it."""
    kind = decision.state.extra.get("block_kind") if decision.action == "block" else None
    return {"block_kind": str(kind)} if kind else {}


def needs_review(store: RedisStore, pid: str, unit: str) -> bool:
    """Whether units.json asks a person to approve this unit once its tests are green."""
    units = store.project_record(pid).units
    entry = units.unit(unit)
    return review_required(units.review, entry.review if entry else None)


def start_fixing(store: RedisStore, pid: str, unit: str, attempt: int) -> list[str]:
    """A coder retry starts on the unit's open bugs: move them to fixing, by the loop."""
    bugs = BugLedger(store.sink(pid, "bugs"))
    moved = []
    for bug in bugs.list(unit_id=unit, status="open"):
        bugs.transition(bug.id, "fixing", by="loop", attempt=attempt)
        moved.append(bug.id)
    return moved


def block_downstream(store: RedisStore, pid: str, unit: str) -> list[str]:
    """Mark every unit downstream of a blocked one blocked_upstream (unless it passed), in
    a round trip or two whatever their number (one events entry per batch of units)."""

    def blocked(user: str, state: UnitState) -> UnitState | None:
        if state.status == "passed":
            return None
        return state.model_copy(update={"status": "blocked_upstream", "updated_at": time.time(),
                                        "extra": {**state.extra, "blocked_by": unit}})

    return _cascade(store, pid, unit, "blocked_upstream", blocked)


def _cascade(
    store: RedisStore, pid: str, unit: str, status: str,
    change: Callable[[str, UnitState], UnitState | None],
) -> list[str]:
    """Apply `change` (None: leave it) to every unit downstream of unit, compare-and-set
    on the states read; a unit that moved meanwhile is read and changed again."""
    record = store.project_record(pid)
    todo = dag.downstream(record.graph, unit, record.dependents)
    done: list[str] = []
    for _ in range(CASCADE_TRIES):
        states = store.get_states(pid, todo)
        changes = {u: (s, new) for u, s in states.items() if (new := change(u, s)) is not None}
        moved = store.cascade_states(pid, status, unit, changes)
        done += moved
        todo = sorted(set(changes) - set(moved))
        if not todo:
            break
    return sorted(done)


def unblock_unit(store: RedisStore, pid: str, unit: str, hint: str | None) -> list[Dispatch]:
    """Re-queue a blocked unit: with a human's hint, as a fresh attempt; a unit blocked by
    the model or the infrastructure resumes its attempt (the hint is then optional)."""
    state = store.get_state(pid, unit)
    if state.status != "blocked":
        raise ValueError(f'unit "{unit}" is {state.status}, not blocked; nothing to unblock')
    kind = state.extra.get("block_kind")
    if kind == CANCELLED:
        mark_unit_cancelled(store, pid, unit, False)  # a person's cancel ends here
    if kind in (*RESUMABLE, CANCELLED) and not hint:
        resumed = resume_blocked(store, pid, [unit], kinds=(kind,))
        if state.attempt == 0:  # cancelled before it started: pending again
            deps = _graph(store, pid)[unit]
            return _start_if_ready(store, pid, unit, deps, current_epoch(store, pid))
        if not resumed:
            raise ValueError(f'unit "{unit}" changed while it was being resumed; try again')
        return resumed
    if not hint:
        raise ValueError(f'unit "{unit}" is blocked ({state.blocked_reason}); give a --hint')
    new = unblock(state, hint)
    store.put_state(pid, unit, new.model_copy(update={"updated_at": time.time()}))
    _unblock_downstream(store, pid, unit)
    start_fixing(store, pid, unit, new.attempt)
    return [Dispatch(msg=StepMsg(pid=pid, unit_id=unit, attempt=new.attempt, mode="retry",
                                 epoch=current_epoch(store, pid)))]


def resume_blocked(
    store: RedisStore, pid: str, units: list[str] | None = None, kinds: tuple[str, ...] = RESUMABLE
) -> list[Dispatch]:
    """Units blocked by the model or the infrastructure (not by their code) resume their
    attempt where it stopped; their dependents wait for them again. (`kinds`: also
    "cancelled", for units a person stopped.)"""
    names = units if units is not None else list(_graph(store, pid))
    out = []
    for unit, state in store.get_states(pid, names).items():
        if state.status != "blocked" or state.extra.get("block_kind") not in kinds:
            continue
        if state.attempt == 0:
            # Cancelled before it started: pending again, released (by reconcile or its last
            # dependency) only once every unit it depends on has passed.
            if store.cas_state(pid, unit, "blocked", 0, UnitState(updated_at=time.time())):
                _unblock_downstream(store, pid, unit)
            continue
        base = recovered(state) or state
        extra = {k: v for k, v in base.extra.items() if k != "block_kind"}
        new = base.model_copy(update={"status": "coding", "blocked_reason": None, "extra": extra,
                                      "updated_at": time.time()})
        if store.cas_state(pid, unit, "blocked", state.attempt, new):
            _unblock_downstream(store, pid, unit)
            out.append(_resend(store, pid, unit, new))
    return out


def _unblock_downstream(store: RedisStore, pid: str, unit: str) -> None:
    """Units downstream of unit that waited on it blocked_upstream are pending again."""

    def pending(user: str, state: UnitState) -> UnitState | None:
        return UnitState() if state.status == "blocked_upstream" else None

    _cascade(store, pid, unit, "pending", pending)


def reconcile(
    store: RedisStore, pid: str, grace_s: float, now: float | None = None
) -> list[Dispatch]:
    """Re-send chains for units that should be moving but have no live step.

    Steps are idempotent (stored records, leases, compare-and-set), so a re-send that
    races a slow but live task costs a redundant message, never a double run. Every
    state is read in one round trip and every lease of an idle unit in another. A
    transition's follow-up left longer than the grace (its worker died) is done first.
    """
    now = now or time.time()
    followed = overdue_followups(store, pid, grace_s, now)
    graph = store.project_record(pid).graph
    epoch = current_epoch(store, pid)
    states = store.get_states(pid, list(graph))
    idle = {}
    for unit, state in states.items():
        # A unit waiting for the model is not idle before its wait is over.
        moved = max(state.updated_at or 0, float(state.extra.get("resume_at") or 0))
        if state.status in ACTIVE and now - moved >= grace_s:
            idle[unit] = state
    leased = _leased(store, pid, idle)
    ready = [unit for unit, deps in graph.items() if states[unit].status == "pending"
             and all(d in states and states[d].status == "passed" for d in deps)]
    started = {d.msg.unit_id: d for d in _start_ready(store, pid, ready, epoch)}
    out = []
    for unit in graph:  # in the project's order, as the units come
        if unit in idle and unit not in leased:
            out.append(_resend(store, pid, unit, idle[unit], epoch))
        elif unit in started:
            out.append(started[unit])
    return followed + out  # (states are read after the follow-ups: no unit twice)


def _start_if_ready(
    store: RedisStore, pid: str, unit: str, deps: list[str], epoch: int
) -> list[Dispatch]:
    """Start a pending unit whose dependencies have all passed (its release was missed)."""
    states = store.get_states(pid, list(deps))
    if not all(s.status == "passed" for s in states.values()):
        return []
    return _start_ready(store, pid, [unit], epoch)


def _start_ready(store: RedisStore, pid: str, units: list[str], epoch: int) -> list[Dispatch]:
    """Start pending units whose dependencies have all passed (their release was missed)."""
    if not units:
        return []
    store.mark_dispatched(pid, units, "reconciled")
    return _start_all(store, pid, units, epoch)


def _leased(store: RedisStore, pid: str, states: dict[str, UnitState]) -> set[str]:
    """The units among these whose current attempt has a live step (any role's lease)."""
    asked: list[tuple[str, int, str]] = []
    for unit, state in states.items():
        starved = int(state.extra.get("starved_reruns", 0))
        roles = ["coder", *(f"tester.{n}" for n in range(1, TESTER_RETRIES + starved + 2))]
        asked += [(unit, state.attempt, role) for role in roles]
    owners = store.lease_owners(pid, asked)
    return {unit for (unit, _, _), owner in zip(asked, owners, strict=True) if owner}


def _resend(
    store: RedisStore, pid: str, unit: str, state: UnitState, epoch: int | None = None
) -> Dispatch:
    """The chain that carries a stalled unit on from its last finished step."""
    epoch = current_epoch(store, pid) if epoch is None else epoch
    coder = load_step(store, pid, unit, "coder", state.attempt, 1)
    if coder is not None:
        # The coder is done: only the tester try the loop is waiting for (and decide) remain.
        tester_try = _try(state)
        return Dispatch(
            msg=coder.msg.model_copy(
                update={"tester_try": tester_try, "skip_coder": tester_try > 1, "epoch": epoch}
            )
        )
    return Dispatch(msg=StepMsg(pid=pid, unit_id=unit, attempt=state.attempt,
                                mode=coder_mode(state),
                                epoch=epoch))


def _try(state: UnitState) -> int:
    """The tester try the loop waits for in the current attempt."""
    return awaited_tester_try(state)


def _graph(store: RedisStore, pid: str) -> dict[str, list[str]]:
    """The project's graph (the record's, shared: read it, never change it)."""
    return store.project_record(pid).graph
