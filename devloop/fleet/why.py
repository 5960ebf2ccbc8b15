"""Why a unit is blocked or stands still, in words, and the commands that move it on."""

from __future__ import annotations

import shlex

from devloop.fleet.records import StepRecord
from devloop.store import UnitState

FAILURES_SHOWN = 2


def failure_of(steps: list[StepRecord], attempt: int) -> str | None:
    """How the attempt failed, from its step records: the coder's self-check items, a
    crashed test run, or the first failing tests with what they got."""
    coder = next((s for s in steps if s.role == "coder" and s.attempt == attempt), None)
    made = coder.outcome if coder else None
    if made is not None and made.status != "completed":
        if made.reason == "validation_failed":
            return f"validation failed: the coder's self-check found {made.summary or '?'}"
        return f"the coder's session ended {made.status} ({made.reason or 'no reason'})"
    runs = [s for s in steps if s.role == "tester" and s.attempt == attempt and s.outcome]
    if not runs:
        return None
    tested = max(runs, key=lambda s: s.tester_try).outcome
    assert tested is not None
    if tested.crashed:
        return f"the test run crashed: {tested.crash_reason or '?'}"
    if tested.failures:
        # A failure with no value (an exception, a compound assert) has got "None".
        shown = [f"{test} got {got}" if got != "None" else f"{test} failed"
                 for test, got in tested.failures[:FAILURES_SHOWN]]
        more = len(tested.failures) - FAILURES_SHOWN
        return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")
    return None


def reason(
    state: UnitState, steps: list[StepRecord], shown_status: str, paused: str | None = None
) -> str | None:
    """Why the unit is where it is, when that needs saying (None: it is moving or done)."""
    if shown_status == "paused":
        return f"paused ({paused}): its checkpoint is kept; `devloop resume` carries it on"
    if shown_status == "interrupted":
        return "interrupted: no worker runs it (the run that drove it stopped)"
    if shown_status == "blocked_upstream":
        return f"waits for {state.extra.get('blocked_by', 'a blocked unit')}, which is blocked"
    if shown_status == "waiting_model":
        return f"waiting for the model: {state.last_error or '?'}"
    if shown_status == "testing" and state.extra.get("retest_attempt") == state.attempt:
        return f"re-test: {state.extra['retest']}"
    if shown_status != "blocked":
        return None
    said = state.blocked_reason or "blocked"
    if state.extra.get("block_kind") in ("model", "infrastructure", "tester"):
        return said  # these name their error already
    failure = failure_of(steps, state.attempt)
    return f"{said}: {failure}" if failure else said


def next_steps(state: UnitState, unit: str, folder: str | None, pid: str) -> list[str]:
    """The commands that move a blocked unit on (for the project folder, when it is known;
    else by the project's id, with DIR for the folder `devloop run` needs)."""
    project = shlex.quote(folder or pid)
    run = f"devloop run {shlex.quote(folder) if folder else 'DIR'}"
    kind = state.extra.get("block_kind")
    if kind in ("model", "infrastructure"):
        what = "the model's API" if kind == "model" else "the error above"
        return [f"# once {what} is fixed, the next run resumes it where it stopped:", run]
    return [
        f'devloop unblock {project} {unit} --hint "what the coder should know this time"',
        run,
    ]
