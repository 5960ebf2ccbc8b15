"""Where chains come from: enqueueing a project, deciding after a test run, releasing
dependents exactly once, unblocking, and reconciling units that lost their task."""

from __future__ import annotations

import time
from pathlib import Path

from devloop import dag
from devloop.fleet.messages import Dispatch, StepMsg
from devloop.fleet.records import (
    StepRecord,
    dispatched_key,
    finished_key,
    load_step,
    save_step,
)
from devloop.ledgers import Timeline
from devloop.loop import AttemptOutcome, awaited_tester_try, decide, unblock
from devloop.project import load_project
from devloop.store import ImportReport, RedisStore, UnitState

# Adds a finished dependency and, when the set is complete, claims the dependent's
# release with SET NX: of N dependencies finishing at once, exactly one call returns 1.
RELEASE = """
redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  if redis.call('SET', KEYS[2], ARGV[3], 'NX') then return 1 end
end
return 0
"""
ACTIVE = ("coding", "testing")
TERMINAL = ("passed", "blocked", "blocked_upstream")


def _start(store: RedisStore, pid: str, unit: str) -> Dispatch:
    """Set a released unit to coding, attempt 1, and return its first chain."""
    return _start_all(store, pid, [unit])[0]


def _start_all(store: RedisStore, pid: str, units: list[str]) -> list[Dispatch]:
    """_start for each unit, their states written in one round trip."""
    now = time.time()
    state = UnitState(status="coding", attempt=1, started_at=now, updated_at=now)
    store.put_states(pid, dict.fromkeys(units, state))
    return [Dispatch(msg=StepMsg(pid=pid, unit_id=u, attempt=1, mode="implement")) for u in units]


def enqueue_project(store: RedisStore, project_dir: Path) -> tuple[ImportReport, list[Dispatch]]:
    """Validate and import a project; release its roots (once: a second enqueue resumes)."""
    project = load_project(project_dir)  # raises ProjectInvalid before anything is written
    report = store.import_project(project)
    dispatches = []
    for unit, deps in project.graph().items():
        if not deps and store.client.set(dispatched_key(store, project.pid, unit), "root", nx=True):
            dispatches.append(_start(store, project.pid, unit))
    return report, dispatches


def release_dependents(store: RedisStore, pid: str, unit: str) -> list[Dispatch]:
    """Record that unit passed; start each dependent whose dependencies have all passed."""
    graph = _graph(store, pid)
    users = dag.dependents(graph).get(unit, [])
    # One round trip for all of them (EVAL: a pipeline would first ask SCRIPT EXISTS).
    with store.client.pipeline(transaction=False) as pipe:
        for user in users:
            keys = [finished_key(store, pid, user), dispatched_key(store, pid, user)]
            pipe.eval(RELEASE, 2, *keys, unit, len(graph[user]), unit)
        claimed = pipe.execute() if users else []
    return _start_all(store, pid, [u for u, won in zip(users, claimed, strict=True) if won])


def decide_after(
    store: RedisStore, msg: StepMsg, budget: int, worker: str = "local"
) -> list[Dispatch]:
    """Apply the red/green decision to a finished chain; return the chains to send next."""
    pid, unit = msg.pid, msg.unit_id
    state = store.get_state(pid, unit)
    if state.attempt != msg.attempt or state.status not in ACTIVE or msg.tester_try != _try(state):
        return []  # decided already (a duplicate chain) or superseded
    outcome = AttemptOutcome(
        coder_status=msg.coder_status or "completed",
        coder_reason=msg.coder_reason or "",
        tester_ran=msg.tests_ok is not None,
        tests_ok=bool(msg.tests_ok),
        crashed=bool(msg.crashed),
        crash_reason=msg.crash_reason,
        failures=tuple(msg.failures),
        hint=msg.hint,
        starved=bool(msg.starved),
    )
    started = time.time()
    decision = decide(state, outcome, budget=budget)
    new = decision.state.model_copy(update={"updated_at": started})
    if not store.cas_state(pid, unit, state.status, state.attempt, new):
        return []
    save_step(
        store,
        pid,
        unit,
        StepRecord(
            role="decide",
            attempt=msg.attempt,
            tester_try=msg.tester_try,
            msg=msg,
            worker=worker,
            sent_at=msg.sent_at,
            started_at=started,
            ended_at=time.time(),
            status=decision.action,
            output={"reason": decision.reason},
        ),
    )
    timeline = Timeline(store.sink(pid, "timeline"))
    timeline.append(
        f"loop_{decision.action}",
        unit_id=unit,
        ref=msg.run_id,
        agent="loop",
        summary=decision.reason,
    )
    if decision.action == "pass":
        return release_dependents(store, pid, unit)
    if decision.action == "retry_coder":
        return [Dispatch(msg=StepMsg(pid=pid, unit_id=unit, attempt=new.attempt, mode="retry"))]
    if decision.action == "retry_tester":
        nxt = msg.model_copy(
            update={
                "tester_try": msg.tester_try + 1,
                "skip_coder": True,
                "tests_ok": None,
                "crashed": None,
                "starved": None,
                "failures": [],
            }
        )
        return [Dispatch(msg=nxt, countdown_s=decision.delay_s)]
    if decision.action == "resume":
        return [Dispatch(msg=msg.model_copy(update={"mode": "resume"}), countdown_s=30)]
    block_downstream(store, pid, unit)
    return []


def block_downstream(store: RedisStore, pid: str, unit: str) -> list[str]:
    """Mark every unit downstream of a blocked one blocked_upstream (unless it passed)."""
    blocked = []
    for user in dag.downstream(_graph(store, pid), unit):
        state = store.get_state(pid, user)
        if state.status != "passed":
            store.put_state(
                pid,
                user,
                state.model_copy(
                    update={
                        "status": "blocked_upstream",
                        "updated_at": time.time(),
                        "extra": {**state.extra, "blocked_by": unit},
                    }
                ),
            )
            blocked.append(user)
    return blocked


def unblock_unit(store: RedisStore, pid: str, unit: str, hint: str) -> list[Dispatch]:
    """A human's hint re-queues a blocked unit; its dependents wait for it again."""
    state = store.get_state(pid, unit)
    if state.status != "blocked":
        raise ValueError(f'unit "{unit}" is {state.status}, not blocked; nothing to unblock')
    new = unblock(state, hint)
    store.put_state(pid, unit, new.model_copy(update={"updated_at": time.time()}))
    for user in dag.downstream(_graph(store, pid), unit):
        user_state = store.get_state(pid, user)
        if user_state.status == "blocked_upstream":
            store.put_state(pid, user, UnitState())
    return [Dispatch(msg=StepMsg(pid=pid, unit_id=unit, attempt=new.attempt, mode="retry"))]


def reconcile(
    store: RedisStore, pid: str, grace_s: float, now: float | None = None
) -> list[Dispatch]:
    """Re-send chains for units that should be moving but have no live step.

    Steps are idempotent (stored records, leases, compare-and-set), so a re-send that
    races a slow but live task costs a redundant message, never a double run.
    """
    now = now or time.time()
    graph = _graph(store, pid)
    out = []
    for unit, deps in graph.items():
        state = store.get_state(pid, unit)
        idle = now - (state.updated_at or 0) >= grace_s
        if state.status in ACTIVE and idle and not _leased(store, pid, unit, state.attempt):
            out.append(_resend(store, pid, unit, state))
        elif state.status == "pending" and all(
            store.get_state(pid, d).status == "passed" for d in deps
        ):
            store.client.set(dispatched_key(store, pid, unit), "reconciled")
            out.append(_start(store, pid, unit))
    return out


def _leased(store: RedisStore, pid: str, unit: str, attempt: int) -> bool:
    tries = awaited_tester_try(store.get_state(pid, unit))
    roles = ("coder", *(f"tester.{n}" for n in range(1, max(tries, 2) + 1)))
    return any(store.lease_owner(pid, unit, attempt, role) for role in roles)


def _resend(store: RedisStore, pid: str, unit: str, state: UnitState) -> Dispatch:
    """The chain that carries a stalled unit on from its last finished step."""
    coder = load_step(store, pid, unit, "coder", state.attempt, 1)
    if coder is not None:
        # The coder is done: only the tester try the loop is waiting for (and decide) remain.
        tester_try = _try(state)
        return Dispatch(
            msg=coder.msg.model_copy(
                update={"tester_try": tester_try, "skip_coder": tester_try > 1}
            )
        )
    mode = "implement" if state.attempt == 1 else "retry"
    return Dispatch(msg=StepMsg(pid=pid, unit_id=unit, attempt=state.attempt, mode=mode))


def _try(state: UnitState) -> int:
    """The tester try the loop waits for in the current attempt."""
    return awaited_tester_try(state)


def _graph(store: RedisStore, pid: str) -> dict[str, list[str]]:
    units = store.project_record(pid).units
    return {u.id: list(u.depends_on) for u in units.units}
