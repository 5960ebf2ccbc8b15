"""The red/green loop as a pure function: (unit state, what the attempt produced) -> decision.

    ready -> coding -> testing -> passed          (or -> review -> passed, when review is required)
                 \\        |-> failed  -> coding (retry with failures and hints)
                  \\       |-> starved -> testing (re-run after a backoff; not a failure)
                  \\       |-> crashed -> testing (tester once more) -> coding
                  \\       |-> crashed by code that tampers with the framework -> coding
                   \\      |-> the tester's own failure -> testing (twice at most) -> blocked
                    \\-> validation_failed -> coding (retry)
    the same failure signature 3 times, or the retry budget spent -> blocked
        (both counted from the attempt a person or a pass last started: `devloop unblock`,
        `--rerun`, a review's changes, a re-test, a rebuild; so an unblocked unit gets the
        whole budget again, not the rest of a spent one)
    model unavailable -> waiting_model (growing backoff) -> the same step, or blocked
    a step raised -> the same step after a backoff (bounded) -> blocked
    review -> passed (a person approves) | coding (a person requests changes, with a note)

Workers carry the decision out; nothing here touches Redis, Celery or the clock.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

from devloop.core.models import StepOutcome, UnitState, UnitStatus

Action = Literal["pass", "review", "retry_coder", "retry_tester", "block", "wait", "retry_step"]

RETRY_BUDGET = 5
SAME_FAILURE_LIMIT = 3
TESTER_RETRIES = 2  # the tester's own failure: the tester tries again, twice at most
CRASH_RETRIES = 1  # a crashed run: the tester once more, then the coder gets the crash
# Unit-state extra: the first attempt the retry budget counts (absent: attempt 1). A person
# or a pass starting the unit again sets it to the attempt they start.
BUDGET_FROM = "budget_from"
# Unit-state extras the waits and step retries keep; a step that ends normally clears them.
RECOVERY_KEYS = ("waiting_since", "model_waits", "resume_at", "step_failures")
# A run starved of CPU (a busy machine) is re-run, not judged: this many times, each
# after a longer wait, and then the unit is blocked as an infrastructure problem.
STARVED_RERUNS = 6
STARVED_BACKOFF_S = 15.0
STARVED_BACKOFF_CAP_S = 240.0


@dataclass(frozen=True)
class Decision:
    """What to do next, and the unit state to write (compare-and-set) before doing it."""

    action: Action
    state: UnitState
    reason: str
    dependents_blocked: bool = field(default=False)
    delay_s: float = 0.0  # wait, retry_step, a starved re-run: how long before the next step


def failure_signature(coder: StepOutcome, tester: StepOutcome) -> str:
    """A short digest of how an attempt failed: the same failure gives the same signature."""
    if not tester.tester_ran or coder.status != "completed":
        basis = f"coder:{coder.status}:{coder.reason}"
    elif tester.crashed:
        basis = "crash:" + (tester.crash_reason or "")[:200]
    else:
        basis = "tests:" + "\n".join(f"{name}={got}" for name, got in sorted(tester.failures))
    return hashlib.sha256(basis.encode()).hexdigest()[:12]


def decide(
    state: UnitState,
    coder: StepOutcome,
    tester: StepOutcome,
    budget: int = RETRY_BUDGET,
    same_limit: int = SAME_FAILURE_LIMIT,
    review: bool = False,
    starved_backoff_s: float = STARVED_BACKOFF_S,
) -> Decision:
    """The next step of a unit after an attempt (its coder's and tester's outcomes), with
    its new state.

    With `review` (units.json says `"review": "required"`), green tests do not pass the
    unit: it waits in `review` for a person, and its dependents are not released yet.
    """
    tester_retries = int(state.extra.get("tester_retries", 0))
    if tester.tester_ran and coder.status == "completed":
        if tester.starved and tester.status == "completed":
            return _starved(state, starved_backoff_s)
        own = _tester_fault(tester)
        if own is None and tester.tests_ok:
            if review:
                waiting = _with(state, "review", failure_signature=None, signature_repeats=0)
                return Decision("review", waiting, "tests green; waiting for a person's review")
            passed = _with(state, "passed", failure_signature=None, signature_repeats=0)
            return Decision("pass", passed, "tests green")
        if (own is not None or tester.crashed) and not (tester.crashed and tester.code_fault):
            why = own or f"test run crashed ({(tester.crash_reason or '')[:120]})"
            limit = TESTER_RETRIES if own is not None else CRASH_RETRIES
            if tester_retries < limit:
                extra = {**state.extra, "tester_retries": tester_retries + 1,
                         "tester_retry_reason": why}
                return Decision(
                    "retry_tester", _with(state, "testing", extra=extra),
                    f"{why}; the tester tries again ({tester_retries + 1} of {limit})",
                )
            if own is not None:
                # Nothing here is the coder's to fix: a human looks at the tests.
                blocked = _with(state, "blocked", blocked_reason=f"the tester failed: {why}",
                                extra={**state.extra, "block_kind": "tester"})
                return Decision("block", blocked, f"the tester failed {tester_retries + 1} "
                                f"times: {why}", True)
    signature = failure_signature(coder, tester)
    repeats = state.signature_repeats + 1 if signature == state.failure_signature else 1
    status: UnitStatus = _failed_status(coder, tester)
    if repeats >= same_limit:
        blocked = _with(state, "blocked", failure_signature=signature, signature_repeats=repeats,
                        last_hint=tester.hint, blocked_reason=f"the same failure {repeats} times")
        return Decision("block", blocked, f"the same failure {repeats} times", True)
    if attempts_spent(state) >= budget:
        blocked = _with(state, "blocked", failure_signature=signature, signature_repeats=repeats,
                        last_hint=tester.hint,
                        blocked_reason=f"retry budget of {budget} attempts spent")
        return Decision("block", blocked, f"retry budget of {budget} attempts spent", True)
    retry = _with(
        state, "coding", attempt=state.attempt + 1, failure_signature=signature,
        signature_repeats=repeats, last_hint=tester.hint,
        extra={**state.extra, "tester_retries": 0, "starved_reruns": 0,
               "last_outcome": status},
    )
    return Decision("retry_coder", retry, f"{status}; coder retries as attempt {retry.attempt}")


def attempts_spent(state: UnitState) -> int:
    """The attempts counted against the retry budget, the current one included: those since
    the last one a person or a pass started (why.py tells the same attempts)."""
    return state.attempt - int(state.extra.get(BUDGET_FROM, 1)) + 1


def attempts_left(state: UnitState, budget: int = RETRY_BUDGET) -> int:
    """How many more attempts the budget allows after the current one."""
    return max(0, budget - attempts_spent(state))


def _starved(state: UnitState, backoff_s: float) -> Decision:
    """A starved run is infrastructure: re-run the tests later, never count it as a failure."""
    reruns = int(state.extra.get("starved_reruns", 0))
    if reruns >= STARVED_RERUNS:
        why = f"infrastructure: {reruns + 1} test runs in a row starved of CPU"
        blocked = _with(state, "blocked", blocked_reason=why,
                        extra={**state.extra, "block_kind": "infrastructure"})
        return Decision("block", blocked, f"{why} (the machine is overloaded); free some CPU, "
                        "then `devloop unblock`", True)
    delay = min(backoff_s * 2**reruns, STARVED_BACKOFF_CAP_S)
    extra = {**state.extra, "starved_reruns": reruns + 1}
    return Decision(
        "retry_tester", _with(state, "testing", extra=extra),
        f"test run starved of CPU (a busy machine, not a failure); re-run in {delay:g} s",
        delay_s=delay,
    )


def awaited_tester_try(state: UnitState) -> int:
    """The tester try the loop waits for in the current attempt (tester and starved re-runs)."""
    extra = state.extra
    return int(extra.get("tester_retries", 0)) + int(extra.get("starved_reruns", 0)) + 1


def _tester_fault(tester: StepOutcome) -> str | None:
    """Why the tester itself failed (not the code), or None when its run stands."""
    if tester.status != "completed":
        why = tester.summary or tester.reason or "no reason"  # its self-check's findings first
        return f"tester session {tester.status} ({why})"
    if not tester.tests_ok and not tester.crashed and not tester.failures:
        return "the test run was red without a failing test"
    if not tester.tests_ok and not tester.crashed and tester.setup_fault:
        return tester.setup_fault
    return None


def wait_for_model(
    state: UnitState, error: str, now: float, base_s: float, max_s: float, total_s: float
) -> Decision:
    """The model is unavailable (its retries ran out): wait longer each time, then block."""
    since = float(state.extra.get("waiting_since", now))
    waits = int(state.extra.get("model_waits", 0)) + 1
    if now - since >= total_s:
        blocked = _with(
            state, "blocked", last_error=error, blocked_reason=f"model unavailable: {error}",
            extra={**_cleared(state), "block_kind": "model"},
        )
        return Decision("block", blocked, f"model unavailable for {now - since:.0f} s: {error}",
                        True)
    delay = max(0.0, min(base_s * 2 ** (waits - 1), max_s, since + total_s - now))
    extra = {**state.extra, "waiting_since": since, "model_waits": waits, "resume_at": now + delay}
    waiting = _with(state, "waiting_model", last_error=error, extra=extra)
    return Decision("wait", waiting, f"model unavailable ({error}); resume in {delay:.3g} s",
                    delay_s=delay)


def after_step_error(
    state: UnitState, error: str, retries: int, base_s: float, max_s: float
) -> Decision:
    """A step raised: run it again after a growing backoff, `retries` times, then block."""
    failures = int(state.extra.get("step_failures", 0)) + 1
    if failures > retries:
        blocked = _with(
            state, "blocked", last_error=error, blocked_reason=f"infrastructure: {error}",
            extra={**_cleared(state), "block_kind": "infrastructure"},
        )
        return Decision("block", blocked, f"infrastructure: a step failed {failures} times: "
                        f"{error}", True)
    delay = min(base_s * 2 ** (failures - 1), max_s)
    extra = {**state.extra, "step_failures": failures}
    again = _with(state, state.status, last_error=error, extra=extra)
    return Decision("retry_step", again, f"step failed ({error}); again in {delay:.3g} s",
                    delay_s=delay)


def recovered(state: UnitState) -> UnitState | None:
    """The state without an outage's or a failed step's marks, or None when it has none."""
    if not any(k in state.extra for k in RECOVERY_KEYS) and state.last_error is None:
        return None
    return state.model_copy(update={"last_error": None, "extra": _cleared(state)})


def _cleared(state: UnitState) -> dict[str, object]:
    return {k: v for k, v in state.extra.items() if k not in RECOVERY_KEYS}


def _failed_status(coder: StepOutcome, tester: StepOutcome) -> UnitStatus:
    if coder.status != "completed":
        return "validation_failed"
    return "crashed" if tester.crashed else "failed"


def _with(state: UnitState, status: UnitStatus, **changes: object) -> UnitState:
    return state.model_copy(update={"status": status, **changes})


def unblock(state: UnitState, hint: str) -> UnitState:
    """A human's way out of `blocked`: a fresh attempt that carries the human's hint."""
    return state.model_copy(update={
        "status": "coding", "attempt": state.attempt + 1, "failure_signature": None,
        "signature_repeats": 0, "last_hint": hint, "last_error": None, "blocked_reason": None,
        "extra": {**{k: v for k, v in _cleared(state).items() if k != "block_kind"},
                  "human_hint": hint, "tester_retries": 0, "starved_reruns": 0,
                  BUDGET_FROM: state.attempt + 1},
    })


def retest(state: UnitState, why: str) -> UnitState:
    """A passed unit whose dependency passed again with other code: a fresh attempt of its
    tester alone over its unchanged code (red sends it to the coder as any red run)."""
    return state.model_copy(update={
        "status": "testing", "attempt": state.attempt + 1, "failure_signature": None,
        "signature_repeats": 0, "last_hint": None, "last_error": None, "blocked_reason": None,
        "extra": {**_cleared(state), "retest": why, "retest_attempt": state.attempt + 1,
                  "tester_retries": 0, "starved_reruns": 0, BUDGET_FROM: state.attempt + 1},
    })


def approve(state: UnitState) -> UnitState:
    """A person approved a unit waiting in `review`: it passes."""
    return state.model_copy(update={"status": "passed", "last_error": None})


def request_changes(state: UnitState, note: str) -> UnitState:
    """A person asked for changes to a unit in `review`: a coder retry carrying the note,
    as a red run's hint would be."""
    return state.model_copy(update={
        "status": "coding", "attempt": state.attempt + 1, "failure_signature": None,
        "signature_repeats": 0, "last_hint": note, "last_error": None,
        "extra": {**_cleared(state), "review_note": note, "tester_retries": 0,
                  "starved_reruns": 0, "last_outcome": "changes_requested",
                  BUDGET_FROM: state.attempt + 1},
    })


def review_required(project_review: str | None, unit_review: str | None) -> bool:
    """Whether a unit waits for a person after green tests: its own `review` field wins,
    else the project's (`"required"` or `"none"`)."""
    return (unit_review or project_review) == "required"


IMPLEMENT_ATTEMPT = "implement_attempt"  # extra: this attempt starts from implement, not a retry


def waiting_again(state: UnitState) -> UnitState:
    """A passed unit to be built again from implement: pending, its attempts counted on
    (its next one follows the last), nothing of the passed attempt's loop state kept."""
    return state.model_copy(update={
        "status": "pending", "failure_signature": None, "signature_repeats": 0,
        "last_hint": None, "last_error": None, "blocked_reason": None, "scripted": False,
        "extra": {},
    })


def started_again(state: UnitState, now: float) -> UnitState:
    """A pending unit that ran before starts its next attempt, from implement."""
    attempt = state.attempt + 1
    return state.model_copy(update={
        "status": "coding", "attempt": attempt, "started_at": now, "updated_at": now,
        "extra": {**state.extra, IMPLEMENT_ATTEMPT: attempt, BUDGET_FROM: attempt},
    })


def coder_mode(state: UnitState) -> str:
    """The coder's mode for the unit's current attempt: implement for its first attempt and
    for one started again from implement, else retry."""
    fresh = state.attempt == 1 or state.extra.get(IMPLEMENT_ATTEMPT) == state.attempt
    return "implement" if fresh else "retry"
