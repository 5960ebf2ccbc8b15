"""Why a unit is blocked or stands still, in words, and the commands that move it on.

A unit the loop blocked for its code is told by the chain of attempts that led there,
first cause first: `the same failure 3 times: <attempt 1's failure> (attempt 1); then:
<the next> (attempts 2-3)`. The chain is the blocking attempt and each attempt before it
the loop sent back to the coder; one a person or a re-test started ends it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from devloop.fleet.records import StepRecord
from devloop.store import UnitState

FAILURES_SHOWN = 2
# Blocks that name their own cause (the tester, the model, the infrastructure, a person's
# cancel): the code's earlier failures did not lead to them.
NOT_CODE = ("model", "infrastructure", "tester", "cancelled")


def failure_of(steps: Sequence[StepRecord], attempt: int) -> str | None:
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
    state: UnitState, steps: list[StepRecord], shown_status: str, paused: str | None = None,
    resume: str = "devloop resume DIR",
) -> str | None:
    """Why the unit is where it is, when that needs saying (None: it is moving or done);
    `resume` is the command that carries a paused project on."""
    if shown_status == "paused":
        return f"paused ({paused}): its checkpoint is kept; `{resume}` carries it on"
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
    return blocked_words(state, steps)


def blocked_words(state: UnitState, steps: Sequence[StepRecord]) -> str:
    """Why a blocked unit is blocked: the loop's rule and, for a block by its code, the
    failures that led to it, first cause first."""
    said = state.blocked_reason or state.last_error or "blocked"
    if state.extra.get("block_kind") in NOT_CODE:
        return said  # these name their cause already
    return story(said, steps, state.attempt)


def chain(steps: Sequence[StepRecord], last: int) -> list[int]:
    """The attempts that led to a block at `last`, oldest first: `last` and each attempt
    before it whose decision sent the unit back to the coder."""
    decided: dict[int, str] = {}
    for step in sorted((s for s in steps if s.role == "decide"),
                       key=lambda s: (s.attempt, s.tester_try)):
        decided[step.attempt] = step.status  # the attempt's last decision
    attempts = [last]
    while attempts[0] > 1 and decided.get(attempts[0] - 1) == "retry_coder":
        attempts.insert(0, attempts[0] - 1)
    return attempts


def story(said: str, steps: Sequence[StepRecord], last: int) -> str:
    """`said`, then how each attempt of the chain to `last` failed: the first cause (the
    earliest failure), then the later ones, each once with the attempts it ended."""
    groups: dict[str, tuple[str, list[int]]] = {}
    for attempt in chain(steps, last):
        failure = failure_of(steps, attempt)
        if failure is None:
            continue
        key = _alike(failure, attempt)
        groups[key] = (failure, [*groups.get(key, ("", []))[1], attempt])
    told = [f"{text} ({attempt_words(numbers)})" for text, numbers in groups.values()]
    if not told:
        return said
    return f"{said}: {told[0]}" + ("; then: " + "; ".join(told[1:]) if told[1:] else "")


def blocked_by_code(steps: Sequence[StepRecord], attempt: int) -> bool:
    """Whether the loop's decision blocked `attempt` for how its code failed (not for the
    tester, the model, the infrastructure or a person): what a folder's records tell."""
    decides = [s for s in steps if s.role == "decide" and s.attempt == attempt]
    last = max(decides, key=lambda s: s.tester_try, default=None)
    return (last is not None and last.status == "block"
            and last.output.get("block_kind") not in NOT_CODE)


def attempt_words(numbers: Sequence[int]) -> str:
    """`attempt 1`, `attempts 2-5`, `attempts 1-2, 4`."""
    spans: list[list[int]] = []
    for n in sorted(set(numbers)):
        if spans and n == spans[-1][-1] + 1:
            spans[-1].append(n)
        else:
            spans.append([n])
    words = ", ".join(f"{s[0]}-{s[-1]}" if len(s) > 1 else f"{s[0]}" for s in spans)
    return ("attempts " if len(numbers) > 1 else "attempt ") + words


def _alike(failure: str, attempt: int) -> str:
    """The failure with its own attempt's number taken out: attempts that failed alike
    (`coder.log has no entry for attempt 3`, `... attempt 4`) are told once."""
    return re.sub(rf"\b(attempt |run-){attempt}\b", r"\1#", failure)


def next_steps(
    state: UnitState, unit: str, folder: str | None, pid: str, run_live: str | None = None
) -> list[str]:
    """The commands that move a blocked unit on (for the project folder, when it is known;
    else by the project's id, with DIR for the folder `devloop run` and `reset` need): a
    unit its code or its tests blocked can also start over (`devloop reset`). While a
    `devloop run` is live on the folder (`run_live`: its pid) it picks the unit up: no
    second run, and no reset (refused while a run is live)."""
    project = shlex.quote(folder or pid)
    hint = f'devloop unblock {project} {unit} --hint "what the coder should know this time"'
    kind = state.extra.get("block_kind")
    fixed = "the model's API" if kind == "model" else "the error above"
    if run_live is not None:
        live = f"# the live run (pid {run_live}) on this folder picks it up"
        if kind in ("model", "infrastructure"):
            return [f"# once {fixed} is fixed, resume it where it stopped:",
                    f"devloop unblock {project} {unit}", live]
        return [hint, live]
    run = f"devloop run {shlex.quote(folder) if folder else 'DIR'}"
    if kind in ("model", "infrastructure"):
        return [f"# once {fixed} is fixed, the next run resumes it where it stopped:", run]
    return [
        hint,
        run,
        # A fresh budget may not be the way on (a spec edit the script or code cannot
        # carry, a wrong turn taken early): starting it over is.
        "# or start it over (its code, tests and attempts go, the spec stays), then run:",
        f"devloop reset {shlex.quote(folder) if folder else 'DIR'} {unit}",
    ]


def rerun_green(steps: Sequence[StepRecord], attempt: int) -> str | None:
    """For an attempt whose green came from a zero-token re-run (no tester session), which
    code the tests ran on and whose tests they were; None otherwise."""
    tested = [s for s in steps if s.role == "tester" and s.attempt == attempt]
    last = max(tested, key=lambda s: s.tester_try, default=None)
    if last is None or not last.output.get("rerun") or not last.output.get("ok"):
        return None
    source = last.output.get("tests_from_attempt")
    whose = f"attempt {source}'s tests" if source else "the checked tests"
    return (
        f"green on attempt {attempt}'s code: {whose} re-ran unchanged, no tester session "
        "needed (0 tokens)"
    )
