"""The red/green loop as a pure function: (unit state, what the attempt produced) -> decision.

    ready -> coding -> testing -> passed
                 \\        |-> failed  -> coding (retry with failures and hints)
                  \\       |-> starved -> testing (re-run after a backoff; not a failure)
                  \\       |-> crashed -> testing (tester once more) -> coding
                   \\-> validation_failed -> coding (retry)
    the same failure signature 3 times, or the retry budget spent -> blocked

Workers carry the decision out; nothing here touches Redis, Celery or the clock.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

from devloop.store.records import UnitState, UnitStatus

Action = Literal["pass", "retry_coder", "retry_tester", "resume", "block"]

RETRY_BUDGET = 5
SAME_FAILURE_LIMIT = 3
TESTER_CRASH_RETRIES = 1
# A run starved of CPU (a busy machine) is re-run, not judged: this many times, each
# after a longer wait, and then the unit is blocked as an infrastructure problem.
STARVED_RERUNS = 6
STARVED_BACKOFF_S = 15.0
STARVED_BACKOFF_CAP_S = 240.0


@dataclass(frozen=True)
class AttemptOutcome:
    """What one coder -> tester chain produced, reduced to what the loop decides on."""

    coder_status: str  # SessionResult.status of the coder (or "completed" when skipped)
    coder_reason: str = ""  # its terminal_reason, e.g. validation_failed
    tester_ran: bool = False
    tests_ok: bool = False
    crashed: bool = False
    crash_reason: str | None = None
    failures: tuple[tuple[str, str], ...] = ()  # (test name, what it got)
    hint: str | None = None
    starved: bool = False  # the test run got too little CPU to judge the code


@dataclass(frozen=True)
class Decision:
    """What to do next, and the unit state to write (compare-and-set) before doing it."""

    action: Action
    state: UnitState
    reason: str
    dependents_blocked: bool = field(default=False)
    delay_s: float = 0.0  # wait this long before the next step (a starved run's backoff)


def failure_signature(outcome: AttemptOutcome) -> str:
    """A short digest of how an attempt failed: the same failure gives the same signature."""
    if not outcome.tester_ran or outcome.coder_status != "completed":
        basis = f"coder:{outcome.coder_status}:{outcome.coder_reason}"
    elif outcome.crashed:
        basis = "crash:" + (outcome.crash_reason or "")[:200]
    else:
        basis = "tests:" + "\n".join(f"{name}={got}" for name, got in sorted(outcome.failures))
    return hashlib.sha256(basis.encode()).hexdigest()[:12]


def decide(
    state: UnitState,
    outcome: AttemptOutcome,
    budget: int = RETRY_BUDGET,
    same_limit: int = SAME_FAILURE_LIMIT,
) -> Decision:
    """The next step of a unit after an attempt, with its new state."""
    if outcome.coder_status == "recovery_required":
        # The model was unreachable: the same attempt resumes from its checkpoint.
        return Decision("resume", _with(state, "coding"), "model unavailable; resume the attempt")
    if outcome.tester_ran and outcome.coder_status == "completed" and outcome.tests_ok:
        passed = _with(state, "passed", failure_signature=None, signature_repeats=0)
        return Decision("pass", passed, "tests green")
    if outcome.starved and outcome.tester_ran and outcome.coder_status == "completed":
        return _starved(state)
    crash_retries = int(state.extra.get("tester_crash_retries", 0))
    if outcome.crashed and outcome.coder_status == "completed" and (
        crash_retries < TESTER_CRASH_RETRIES
    ):
        extra = {**state.extra, "tester_crash_retries": crash_retries + 1}
        return Decision(
            "retry_tester", _with(state, "testing", extra=extra),
            f"test run crashed ({(outcome.crash_reason or '')[:120]}); tester once more",
        )
    signature = failure_signature(outcome)
    repeats = state.signature_repeats + 1 if signature == state.failure_signature else 1
    status: UnitStatus = _failed_status(outcome)
    if repeats >= same_limit:
        blocked = _with(state, "blocked", failure_signature=signature, signature_repeats=repeats,
                        last_hint=outcome.hint)
        return Decision("block", blocked, f"the same failure {repeats} times", True)
    if state.attempt >= budget:
        blocked = _with(state, "blocked", failure_signature=signature, signature_repeats=repeats,
                        last_hint=outcome.hint)
        return Decision("block", blocked, f"retry budget of {budget} attempts spent", True)
    retry = _with(
        state, "coding", attempt=state.attempt + 1, failure_signature=signature,
        signature_repeats=repeats, last_hint=outcome.hint,
        extra={**state.extra, "tester_crash_retries": 0, "starved_reruns": 0,
               "last_outcome": status},
    )
    return Decision("retry_coder", retry, f"{status}; coder retries as attempt {retry.attempt}")


def _starved(state: UnitState) -> Decision:
    """A starved run is infrastructure: re-run the tests later, never count it as a failure."""
    reruns = int(state.extra.get("starved_reruns", 0))
    if reruns >= STARVED_RERUNS:
        extra = {**state.extra, "blocked_reason": "infrastructure"}
        return Decision(
            "block", _with(state, "blocked", extra=extra),
            f"infrastructure: {reruns + 1} test runs in a row starved of CPU (the machine is "
            "overloaded); free some CPU, then `devloop unblock`", True,
        )
    delay = min(STARVED_BACKOFF_S * 2**reruns, STARVED_BACKOFF_CAP_S)
    extra = {**state.extra, "starved_reruns": reruns + 1}
    return Decision(
        "retry_tester", _with(state, "testing", extra=extra),
        f"test run starved of CPU (a busy machine, not a failure); re-run in {delay:g} s",
        delay_s=delay,
    )


def awaited_tester_try(state: UnitState) -> int:
    """The tester try the loop waits for in the current attempt (crash and starved re-runs)."""
    extra = state.extra
    return int(extra.get("tester_crash_retries", 0)) + int(extra.get("starved_reruns", 0)) + 1


def _failed_status(outcome: AttemptOutcome) -> UnitStatus:
    if outcome.coder_status != "completed":
        return "validation_failed"
    return "crashed" if outcome.crashed else "failed"


def _with(state: UnitState, status: UnitStatus, **changes: object) -> UnitState:
    return state.model_copy(update={"status": status, **changes})


def unblock(state: UnitState, hint: str) -> UnitState:
    """A human's way out of `blocked`: a fresh attempt that carries the human's hint."""
    return state.model_copy(update={
        "status": "coding", "attempt": state.attempt + 1, "failure_signature": None,
        "signature_repeats": 0, "last_hint": hint,
        "extra": {**state.extra, "human_hint": hint, "tester_crash_retries": 0,
                  "starved_reruns": 0},
    })
