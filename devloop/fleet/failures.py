"""When a step cannot end normally: the model is unavailable, the step raised, a session's
package install timed out (infra_flake), or the host cannot run sessions at all. Each path
ends: a bounded wait or retry, then `blocked`; an environment problem stops the run with
its fix.

    DevLoopError
    +-- StepWaiting          run the same step again after `retry_in_s` (unit state says why)
    +-- StepStopped          the chain ends here
        +-- StepSuperseded   the unit moved past this attempt (a late redelivery)
        +-- UnitBlocked      the unit is blocked (model unavailable, infrastructure)
        +-- EnvironmentBroken  no session can run on this host; the run stops with the fix
        +-- StepPaused       the project is paused (budget, a cancel): the unit stays where
                             it is, its session's checkpoint kept, until it is resumed
"""

from __future__ import annotations

import time

from devloop.core.config import Settings
from devloop.core.errors import DevLoopError, SandboxUnavailable
from devloop.core.loop import Decision, after_step_error, wait_for_model
from devloop.fleet.dispatch import TERMINAL, move
from devloop.fleet.messages import StepMsg
from devloop.fleet.transition import followup
from devloop.store import RedisStore, UnitState

ERROR_CHARS = 300


class StepWaiting(DevLoopError):
    """Run this step again after `retry_in_s` (the model was unavailable, or it raised)."""

    def __init__(self, message: str, retry_in_s: float) -> None:
        self.retry_in_s = retry_in_s
        super().__init__(message)


class StepStopped(DevLoopError):
    """The chain ends at this step: nothing is sent after it."""


class StepSuperseded(StepStopped):
    """The unit has moved past this attempt (a late redelivery): drop the chain."""


class UnitBlocked(StepStopped):
    """The step blocked its unit (model unavailable, or infrastructure)."""


class EnvironmentBroken(StepStopped):
    """This host cannot run any session (the sandbox cannot start): the run stops."""


class StepPaused(StepStopped):
    """The project is paused (its budget is spent, a person cancelled it or the unit): the
    step stores nothing and the unit stays where it is for `devloop resume`."""


def one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, short enough for a table cell."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text[:ERROR_CHARS]


def model_unavailable(
    store: RedisStore, settings: Settings, msg: StepMsg, role: str, error: str
) -> StepStopped | StepWaiting:
    """The session's model calls ran out of retries: wait (growing backoff) or block."""
    state = store.get_state(msg.pid, msg.unit_id)
    if _superseded(state, msg):
        return StepSuperseded(f"{msg.task_id(role)}: unit is at attempt {state.attempt}")
    decision = wait_for_model(
        state, error[:ERROR_CHARS], time.time(), settings.model_retry_base_s,
        settings.retry_max_s, settings.model_wait_total_s,
    )
    return _apply(store, msg, role, state, decision)


def step_failed(
    store: RedisStore, settings: Settings, msg: StepMsg, role: str, exc: Exception
) -> StepStopped | StepWaiting:
    """A step raised: record the error on the unit; retry with backoff, then block.

    SandboxUnavailable fails every session of the host alike, so it stops the run instead
    (the unit stays where it was, for the run after the fix).
    """
    error = one_line(exc)
    state = store.get_state(msg.pid, msg.unit_id)
    if _superseded(state, msg):
        return StepSuperseded(f"{msg.task_id(role)}: unit is at attempt {state.attempt}")
    if isinstance(exc, SandboxUnavailable):
        new = state.model_copy(update={"last_error": error, "updated_at": time.time()})
        store.cas_state(msg.pid, msg.unit_id, state.status, state.attempt, new)
        # Last: the environment key stops the run, which may stop this worker at once.
        store.set_environment_error(msg.pid, str(exc))
        return EnvironmentBroken(str(exc))
    decision = after_step_error(
        state, error, settings.step_retries, settings.step_retry_base_s, settings.retry_max_s
    )
    return _apply(store, msg, role, state, decision)


def model_refused(store: RedisStore, msg: StepMsg, role: str, error: str) -> StepStopped:
    """The model API refuses DevLoop itself (a wrong key, no permission, billing, a model
    id it does not know): every session fails alike, so the run stops with the fix, the
    unit stays at its attempt and its checkpoint is kept for the run after the fix."""
    if "unknown model" in error:
        fix = ("set DEVLOOP_MODEL to a model id the API knows (default claude-sonnet-4-6), "
               "then run again")
    else:
        fix = ("set ANTHROPIC_API_KEY to a valid key with access to the model "
               "(console.anthropic.com), then run again")
    why = f"the model API refused DevLoop's request ({error[:ERROR_CHARS]}); fix: {fix}"
    state = store.get_state(msg.pid, msg.unit_id)
    new = state.model_copy(update={"last_error": why[:ERROR_CHARS], "updated_at": time.time()})
    store.cas_state(msg.pid, msg.unit_id, state.status, state.attempt, new)
    # Last: the environment key stops the run, which may stop this worker at once.
    store.set_environment_error(msg.pid, why)
    return EnvironmentBroken(why)


def infra_flake(
    store: RedisStore, settings: Settings, msg: StepMsg, role: str, error: str
) -> StepStopped | StepWaiting:
    """A session's package install ran out of time (coder spec: "npm install timeout ->
    retry; infra_flake"): the infrastructure's failure, not the model's. The step runs
    again like one that raised (its session resumes and runs the install again), then
    the unit is blocked as infrastructure; the attempt is not counted."""
    state = store.get_state(msg.pid, msg.unit_id)
    if _superseded(state, msg):
        return StepSuperseded(f"{msg.task_id(role)}: unit is at attempt {state.attempt}")
    decision = after_step_error(
        state, f"infra_flake: {error}"[:ERROR_CHARS], settings.step_retries,
        settings.step_retry_base_s, settings.retry_max_s,
    )
    return _apply(store, msg, role, state, decision)


def request_refused(
    store: RedisStore, settings: Settings, msg: StepMsg, role: str, error: str
) -> StepStopped | StepWaiting:
    """The model API refused a session's request as invalid: run the step again (from its
    checkpoint) like one that raised, then block the unit as infrastructure with the API's
    message. No attempt is spent and nothing reaches the coder as a hint."""
    state = store.get_state(msg.pid, msg.unit_id)
    if _superseded(state, msg):
        return StepSuperseded(f"{msg.task_id(role)}: unit is at attempt {state.attempt}")
    why = f"the model API refused the {role}'s request as invalid ({error})"
    decision = after_step_error(
        state, why[:ERROR_CHARS], settings.step_retries, settings.step_retry_base_s,
        settings.retry_max_s,
    )
    return _apply(store, msg, role, state, decision)


def _superseded(state: UnitState, msg: StepMsg) -> bool:
    return state.attempt != msg.attempt or state.status in TERMINAL


def _apply(
    store: RedisStore, msg: StepMsg, role: str, state: UnitState, decision: Decision
) -> StepStopped | StepWaiting:
    """Write the decision's state (compare-and-set), log it, block downstream if it blocks."""
    pid, unit = msg.pid, msg.unit_id
    new = decision.state.model_copy(update={"updated_at": time.time()})
    if move(store, pid, unit, state, new, f"loop_{decision.action}", msg.task_id(role),
            decision.reason, followup(decision.action, new, msg.epoch)) is None:
        return StepSuperseded(f"{msg.task_id(role)}: the unit's state moved on")
    if decision.action == "block":
        return UnitBlocked(f"{msg.task_id(role)}: {decision.reason}")
    return StepWaiting(f"{msg.task_id(role)}: {decision.reason}", decision.delay_s)
