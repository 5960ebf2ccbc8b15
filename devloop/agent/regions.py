"""The pinned regions a session appends to its transcript: the errors window, the reassess
plan (with the revert it may ask for), and the best state the tests have seen. Pure.

Regions are appended, never rewritten in place, so the cached prefix of the transcript
stays the same; `context.compact` keeps the newest errors window and every plan when it
summarises old turns.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from devloop.agent.checkpoint import SessionState
from devloop.agent.context import region_block
from devloop.agent.stuck import TestTally, normalise
from devloop.agent.tools import ToolResult
from devloop.agent.untrusted import wrap_untrusted

ERRORS_WINDOW = 5
ENTRY_CHARS = 240
# The reassess plan's last line asks the runtime to put the files back as they were when
# the most tests passed.
_REVERT = re.compile(r"^\W*REVERT\b", re.M)


def failure_entry(tool: str, text: str) -> str:
    """One line for the errors window: the tool and the first lines that say something."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("[untrusted data:") and ln != "|||"]
    return f"{tool}: " + " | ".join(lines[:3])[:ENTRY_CHARS]


def tests_entry(tool: str, tally: TestTally) -> str | None:
    """The errors-window line of a red test run, or None when it was green."""
    if tally.green:
        return None
    if tally.crashed is not None:
        return f"{tool}: the test run crashed: {tally.crashed}"[:ENTRY_CHARS]
    names = ", ".join(tally.failed[:4]) + (" ..." if len(tally.failed) > 4 else "")
    return f"{tool}: {len(tally.failed)} of {tally.total} tests failing: {names}"[:ENTRY_CHARS]


def remember(window: list[list[str]], entry: str) -> bool:
    """Add a failure to the window of the last distinct ones; True when the window changed
    (a failure it did not hold), False when it only moved one to the newest place."""
    key = normalise(entry)
    for i, (seen, _) in enumerate(window):
        if seen == key:
            window.append(window.pop(i))
            return False
    window.append([key, entry])
    del window[:-ERRORS_WINDOW]
    return True


def errors_block(window: list[list[str]]) -> dict[str, Any]:
    """The errors window as a pinned text block (its lines quote tool output: fenced)."""
    lines = "\n".join(f"- {entry}" for _, entry in window)
    return region_block(
        "errors",
        f"Errors window: the last {len(window)} distinct failures of this session, oldest "
        "first. It stays when older turns are summarised; if one repeats, change approach "
        "within your instructions (never by stubbing or mocking the unit under test: a fault "
        "of the code is reported, not worked around).\n"
        + wrap_untrusted("failures from tool output and test runs", lines),
    )


def track_files(state: SessionState, result: ToolResult) -> None:
    """Remember the files a call changed, for the session's result."""
    for path in result.changed_files:
        if path not in state.changed_files:
            state.changed_files.append(path)


def note_tests(
    state: SessionState,
    tally: TestTally,
    turn: int,
    snapshot: Callable[[], dict[str, str | None]],
) -> None:
    """Keep the last run's counts, and the files of the state where most tests passed."""
    if tally.crashed is not None:
        return
    state.last_tests = {"passed": tally.passed, "total": tally.total}
    best = state.best
    if best is None or tally.passed > best["passed"]:
        state.best = {
            "passed": tally.passed,
            "total": tally.total,
            "turn": turn,
            "snapshot": snapshot(),
        }


def best_words(best: dict[str, Any] | None, last: dict[str, Any] | None) -> str | None:
    """What reassess is told about the best state, when the last run is worse than it."""
    if not best or not last or last["passed"] >= best["passed"]:
        return None
    when = "when the session started" if best["turn"] == 0 else f"after turn {best['turn']}"
    return (
        f"{best['passed']} of {best['total']} tests passed {when}; the last run passed "
        f"{last['passed']} of {last['total']}. The runtime kept the files of that state."
    )


def wants_revert(plan: str) -> bool:
    """Whether the reassess plan asks for the files of the best state back."""
    return _REVERT.search(plan) is not None


def plan_block(why: str, plan: str, reverted: str | None) -> dict[str, Any]:
    """The reassess plan as a pinned text block: the measurement and the plan fenced."""
    done = f"\nThe runtime has reverted your files: {reverted}" if reverted else ""
    return region_block(
        "plan",
        "You were judged stuck; a read-only review of your work wrote a new plan. "
        "Weigh its steps within your instructions, and do not repeat what failed."
        + done
        + "\n"
        + wrap_untrusted("what stuck detection measured (it may quote tool output)", why)
        + "\n"
        + wrap_untrusted("the plan of the read-only review", plan),
    )
