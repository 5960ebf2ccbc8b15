"""Run one step of a chain (coder or tester) idempotently, under a lease with a heartbeat.

Redis delivers at least once: a redelivered step whose record exists returns that record's
message (the chain carries on, nothing runs twice); one whose lease is alive elsewhere is
busy (the caller retries later); otherwise it runs, resuming the session's checkpoint.
A step that cannot end normally (the model is unavailable, it raised) stores no record: it
raises StepWaiting (run it again later) or StepStopped (the chain ends; see failures.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from devloop.agent.toolloop import INVALID, REFUSED
from devloop.agent.tools import ProgressEvent
from devloop.core.config import Settings
from devloop.core.errors import DevLoopError
from devloop.core.loop import recovered
from devloop.core.models import Failure, RunResult
from devloop.fleet.control import MeteredProvider, StopFlag, stop_reason
from devloop.fleet.dispatch import TERMINAL, decide_after
from devloop.fleet.failures import (
    EnvironmentBroken,
    StepPaused,
    StepStopped,
    StepSuperseded,
    StepWaiting,
    infra_flake,
    model_refused,
    model_unavailable,
    request_refused,
    step_failed,
)
from devloop.fleet.messages import Dispatch, StepMsg, StepRole
from devloop.fleet.records import (
    StepOutcome,
    StepRecord,
    StepStart,
    begin_step,
    environment_error,
    save_step,
)
from devloop.llm.base import LLMProvider
from devloop.roles.coder import run_coder
from devloop.roles.runtime import RoleRequest
from devloop.roles.tester import run_tester
from devloop.runners.tamper import is_code_fault
from devloop.store import Fence, LeaseLost, RedisStore, UnitState
from devloop.store.base import StoreError

LEASE_TTL_S = 60.0
HEARTBEAT_S = 15.0


class StepBusy(DevLoopError):
    """The step's lease is held by a live run elsewhere: try again after `retry_in_s`."""

    def __init__(self, msg: StepMsg, role: str, retry_in_s: float) -> None:
        self.retry_in_s = retry_in_s
        super().__init__(f"{msg.task_id(role)} is running elsewhere; retry in {retry_in_s:.0f} s")


@dataclass
class StepEnv:
    """What a step needs from its worker: state, settings, a model, who it is, progress."""

    store: RedisStore
    settings: Settings
    provider: Callable[[], LLMProvider]
    owner: str
    emit: Callable[[ProgressEvent], None] = lambda e: None
    lease_ttl_s: float = LEASE_TTL_S
    heartbeat_s: float = HEARTBEAT_S


def run_step(role: StepRole, env: StepEnv, msg: StepMsg) -> StepMsg:
    """Run the coder or tester step of msg once, however often it is delivered.

    Raises StepBusy (its lease is held elsewhere), StepWaiting (run it again later) or
    StepStopped (the chain ends: superseded, blocked, or the environment is broken).
    """
    lease_role = role if role == "coder" else f"tester.{msg.tester_try}"
    start = begin_step(env.store, msg, role, lease_role, env.owner, env.lease_ttl_s)
    if start.done is not None:
        return start.done.msg
    with StepLease(env, msg, role, lease_role, held=start.leased) as lease:
        _may_start(role, env, msg, start, lease)
        record = _session(role, env, msg, start, lease)
        _may_keep(role, env, msg, record)
        saved = lease.save(record)
    if recovered(start.state) is not None:
        _clear_marks(env.store, msg)
    return saved.msg


class StepLease:
    """A step's lease over a with block: renewed by a heartbeat inside it, given up on the
    way out whichever way that is, except when the step's save gave it up with the record,
    another worker took it over (it is theirs now), or Redis is away (it runs out alone).

    Every write of the step is fenced by it (`fence`): a worker paused past its lease while
    another took the step over finds its writes refused (LeaseLost) when it wakes. The
    session stops before its next turn when `stop` is set: the project paused, this unit
    cancelled, or (by the heartbeat) the lease lost.
    """

    def __init__(
        self, env: StepEnv, msg: StepMsg, role: str, lease_role: str, held: bool
    ) -> None:
        self.env, self.msg, self.role, self.lease_role = env, msg, role, lease_role
        self.held = held
        self.fence = env.store.lease_fence(msg.pid, msg.unit_id, msg.attempt, lease_role,
                                           env.owner)
        self.stop = StopFlag(env.store, msg.pid, msg.unit_id)
        self._beat: Heartbeat | None = None

    def __enter__(self) -> StepLease:
        if self.held:
            self._beat = Heartbeat(self.env, self.msg, self.lease_role, self.stop)
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        self._stop_beat()
        if self.held and not isinstance(exc, StoreError):
            self.env.store.release(
                self.msg.pid, self.msg.unit_id, self.msg.attempt, self.lease_role, self.env.owner
            )

    def still_held(self) -> bool:
        """Whether the lease is still this worker's (the heartbeat never found it gone and
        Redis names this worker); once not, it is never released here."""
        lost = self._beat is not None and self._beat.lost.is_set()
        self.held = not lost and _holds(self.env.store, self.msg, self.lease_role, self.env.owner)
        return self.held

    def taken_over(self, cause: BaseException | None) -> StepSuperseded:
        """The end of a step whose lease another worker took while this one was paused."""
        self.held = False
        why = f" ({cause})" if isinstance(cause, LeaseLost) else ""
        return StepSuperseded(f"{self.msg.task_id(self.role)}: its lease was taken over{why}; "
                              "stopped")

    def save(self, record: StepRecord) -> StepRecord:
        """Store the step's record and give the lease up, in one fenced step (the next step
        waits on it)."""
        self._stop_beat()
        try:
            saved = save_step(self.env.store, self.msg.pid, self.msg.unit_id, record,
                              fence=self.fence)
        except LeaseLost as lost:
            raise self.taken_over(lost) from None
        self.held = False
        return saved

    def _stop_beat(self) -> None:
        if self._beat is not None:
            self._beat.stop()  # the lease then lasts until released or its TTL runs out
            self._beat = None


def _may_start(
    role: StepRole, env: StepEnv, msg: StepMsg, start: StepStart, lease: StepLease
) -> None:
    """Raise when the step may not run now: superseded, leased elsewhere, the project
    paused, or the environment broken."""
    store, pid, unit, state = env.store, msg.pid, msg.unit_id, start.state
    stale = state.attempt != msg.attempt or state.status in TERMINAL
    if stale or (role == "tester" and start.coder is None):
        why = f"unit is at attempt {state.attempt}, {state.status}" if stale else (
            "no coder step of this attempt has finished"
        )
        raise StepSuperseded(f"{msg.task_id(role)}: {why}")
    if not lease.held:
        raise StepBusy(msg, role, env.lease_ttl_s)
    paused = stop_reason(store, pid, unit)
    if paused is not None:
        # No new session while the project is paused: the unit waits where it is.
        raise StepPaused(f"{msg.task_id(role)}: the project is paused ({paused})")
    broken = environment_error(store, pid)
    if broken is not None:
        # The run is stopping with the fix: no session may run (and spend, or clear the
        # cause the user is shown) until a new run clears it.
        raise EnvironmentBroken(f"{msg.task_id(role)}: not started: {broken}")


def _session(
    role: StepRole, env: StepEnv, msg: StepMsg, start: StepStart, lease: StepLease
) -> StepRecord:
    """Run the role's session under the lease and return the step's record. A raise is
    recorded on the unit (retried, then blocked), unless the lease was lost meanwhile: a
    zombie records nothing."""
    state, started = start.state, time.time()
    try:
        _mark(env.store, msg, state, "coding" if role == "coder" else "testing", lease.fence)
        record = _run(role, env, msg, started, state, start.coder, lease.fence, lease.stop)
    except LeaseLost as lost:
        raise lease.taken_over(lost) from None
    except StoreError:
        raise  # Redis itself is away: the caller retries; the lease runs out on its own
    except Exception as exc:
        if not lease.still_held():
            raise lease.taken_over(exc) from exc
        raise step_failed(env.store, env.settings, msg, role, exc) from exc
    if not lease.still_held():
        raise lease.taken_over(None)
    return record


def _may_keep(role: StepRole, env: StepEnv, msg: StepMsg, record: StepRecord) -> None:
    """Raise when the session ended in no outcome to keep: stopped between turns (a pause
    or a cancel: the checkpoint resumes it), or the model unavailable (the same step runs
    again and calls the model for real)."""
    store, outcome = env.store, record.outcome or StepOutcome()
    if outcome.status == "cancelled" and outcome.reason == "cancelled":
        raise StepPaused(f"{msg.task_id(role)}: stopped before its next turn "
                         f"({stop_reason(store, msg.pid, msg.unit_id) or 'cancelled'}); "
                         "checkpoint kept")
    if outcome.status == "recovery_required":
        error = outcome.summary or outcome.reason
        if outcome.reason == REFUSED:
            raise model_refused(store, msg, role, error)
        if outcome.reason == "infra_flake":
            raise infra_flake(store, env.settings, msg, role, error)
        if outcome.reason == INVALID:
            raise request_refused(store, env.settings, msg, role, error)
        raise model_unavailable(store, env.settings, msg, role, error)


def decide_step(env: StepEnv, msg: StepMsg) -> list[Dispatch]:
    """decide_after under the same failure handling as a step (retried, then blocked)."""
    try:
        return decide_after(env.store, msg, env.settings.retry_budget, worker=env.owner,
                            starved_backoff_s=env.settings.starved_backoff_s)
    except (StoreError, StepStopped, StepWaiting):
        raise
    except Exception as exc:
        raise step_failed(env.store, env.settings, msg, "decide", exc) from exc


class Heartbeat:
    """Renews a step's lease every env.heartbeat_s on a thread of its own, until stopped.

    A renewal that finds the lease gone (it ran out while this worker was paused, and
    another took the step over) sets `lost` and the session's stop flag: the session stops
    at its next turn.
    """

    def __init__(
        self, env: StepEnv, msg: StepMsg, lease_role: str, stop: threading.Event
    ) -> None:
        self.env, self.msg, self.lease_role, self.stop_session = env, msg, lease_role, stop
        self.lost = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        env, msg = self.env, self.msg
        while not self._stopped.wait(env.heartbeat_s):
            try:
                held = env.store.heartbeat(
                    msg.pid, msg.unit_id, msg.attempt, self.lease_role, env.owner,
                    env.lease_ttl_s,
                )
            except StoreError:
                continue  # Redis restarting: try again at the next beat
            if not held:
                self.lost.set()
                self.stop_session.set()
                return

    def stop(self) -> None:
        """Stop renewing (the lease then lasts until released or its TTL runs out)."""
        self._stopped.set()
        self._thread.join(timeout=5)


def _holds(store: RedisStore, msg: StepMsg, lease_role: str, owner: str) -> bool:
    """Whether owner still holds the step's lease."""
    return store.lease_owner(msg.pid, msg.unit_id, msg.attempt, lease_role) == owner


def _mark(
    store: RedisStore, msg: StepMsg, state: UnitState, status: str, fence: Fence
) -> None:
    """Move the unit from state to coding/testing for this attempt (compare-and-set, best
    effort: a state changed since it was read stays as it is)."""
    if state.attempt == msg.attempt and state.status != status:
        new = state.model_copy(
            update={
                "status": status,
                "updated_at": time.time(),
                "started_at": state.started_at or time.time(),
            }
        )
        store.cas_state(msg.pid, msg.unit_id, state.status, state.attempt, new, fence)


def _clear_marks(store: RedisStore, msg: StepMsg) -> None:
    """The step ended normally: drop the outage's or the failed step's marks (best effort)."""
    state = store.get_state(msg.pid, msg.unit_id)
    new = recovered(state)
    if new is not None and state.attempt == msg.attempt:
        store.cas_state(msg.pid, msg.unit_id, state.status, state.attempt, new)


def _run(
    role: StepRole,
    env: StepEnv,
    msg: StepMsg,
    started: float,
    state: UnitState,
    coder_record: StepRecord | None,
    fence: Fence,
    stop: StopFlag,
) -> StepRecord:
    """Run the role and build the step's record, with the outcome decide reads."""
    coder_status = (coder_record.outcome or StepOutcome()).status if coder_record else None
    # Every model call counts toward the project's budget, across every worker.
    provider = MeteredProvider(env.provider(), env.store, msg.pid, msg.unit_id)
    if role == "coder":
        request = RoleRequest(
            msg.pid, msg.unit_id, "coder", msg.mode, msg.attempt, reflect_hint=state.last_hint,
            fence=fence,
        )
        run, coder = run_coder(env.store, env.settings, provider, request, env.emit, stop)
        session = run.session
        outcome = StepOutcome(
            status=session.status if session else "completed",
            reason=session.terminal_reason if session else "",
            summary=session.failure_summary if session else None,
            paperwork_missing=session.paperwork_missing if session else [],
        )
        output, tokens = coder.model_dump(mode="json"), coder.tokens_used
        timings = run.prepared.timings
    elif coder_status != "completed":
        # Nothing to test: the coder did not finish; decide will send it back.
        outcome, output, tokens, session, timings = StepOutcome(), {}, 0, None, {}
    else:
        # A fresh attempt (the first, or one started again from implement) is tested anew.
        fresh = msg.attempt == 1 or msg.mode == "implement"
        mode = "test" if fresh and msg.tester_try == 1 else "retry"
        why = state.extra.get("tester_retry_reason") if msg.tester_try > 1 else None
        request = RoleRequest(
            msg.pid, msg.unit_id, "tester", mode, msg.attempt, run_id=msg.run_id,
            tester_try=msg.tester_try, reflect_hint=why, fence=fence,
        )
        run, tester = run_tester(env.store, env.settings, provider, request, env.emit, stop)
        session = run.session
        first = next(iter(tester.failures), None)
        crash_reason = _crash_reason(env, msg) if tester.crashed else None
        outcome = StepOutcome(
            status=session.status if session else "completed",
            reason=session.terminal_reason if session else "",
            summary=session.failure_summary if session else None,
            tester_ran=True,
            tests_ok=tester.ok,
            crashed=tester.crashed,
            crash_reason=crash_reason,
            code_fault=tester.crashed and is_code_fault(crash_reason),
            failures=[(f.test, str(f.got)) for f in tester.failures],
            hint=first.hint if first else None,
            starved=tester.starved,
            setup_fault=setup_fault(tester.failures),
            paperwork_missing=session.paperwork_missing if session else [],
        )
        output, tokens = tester.model_dump(mode="json", by_alias=True), tester.tokens_used
        timings = run.prepared.timings
    # The next step is sent the moment this one returns: its queue wait starts now.
    ended = time.time()
    return StepRecord(
        role=role,
        attempt=msg.attempt,
        tester_try=msg.tester_try,
        msg=msg.model_copy(update={"sent_at": ended}),
        worker=env.owner,
        sent_at=msg.sent_at,
        started_at=started,
        ended_at=ended,
        tokens=tokens,
        cost_usd=session.cost_usd if session else 0.0,
        status=session.status if session else "completed",
        output=output,
        timings=timings,
        outcome=outcome,
    )


def setup_fault(failures: list[Failure]) -> str | None:
    """What is wrong when a failure of a red run is the tests' own set-up (None: none is).
    One is enough, as for the runner's next_action: the run proves nothing about the code
    until the tests stand."""
    broken = [f for f in failures if f.fault == "tests"]
    if not broken:
        return None
    more = f" (and {len(broken) - 1} more)" if len(broken) > 1 else ""
    return f"the tests' own set-up failed: {broken[0].hint}"[:1000] + more  # the hint names it


def _crash_reason(env: StepEnv, msg: StepMsg) -> str | None:
    """The crash reason from the committed result.json of the run."""
    raw = env.store.unit_file(msg.pid, msg.unit_id, f"runs/{msg.run_id}/result.json")
    return RunResult.model_validate_json(raw).crash_reason if raw else None
