"""Stuck detection on the patterns that happen, in real coder retries (verify_tests runs
pytest in the sandbox): the tests red with the same failures, a file rewritten with no
change in the outcome, counts that reset on progress, and a revert to the best state."""

from __future__ import annotations

from typing import Any

from tests.roles.retry_rig import (
    FIXED,
    HALF,
    KEY,
    PID,
    T1,
    UNIT,
    Retry,
    plan,
    pricing,
    retry,
    wrap_up,
    write,
)
from tests.roles.test_self_checks import call

__all__ = ["retry"]  # the fixture

PLAN = (
    "1. Read tests/test_pricing.py.\n2. Multiply in line_total.\n"
    "Do not touch again: apply_discount"
)
# Three different ways to keep both line_total tests red.
STILL_RED = [pricing("price_cents - qty"), pricing("qty + price_cents"), pricing("price_cents * 2")]
# Three ways to break apply_discount the same way (only the SAVE10 test red).
WORSE = [
    pricing("price_cents * qty", "total_cents - total_cents // 100"),
    pricing("price_cents * qty", "total_cents - total_cents // 50"),
    pricing("price_cents * qty", "total_cents"),
]
VERIFY = call("verify_tests")


def reassess_asks(ended: Retry) -> list[str]:
    """The first message of each reassess session."""
    return [
        r.body["messages"][0]["content"][0]["text"]
        for r in ended.stub.requests
        if r.session_key.startswith(f"{KEY}.reassess.") and r.turn == 1
    ]


def pinned(ended: Retry) -> list[str]:
    """The plan blocks the main session carried in its last request."""
    messages = ended.requests()[-1].body["messages"]
    return [
        b["text"]
        for m in messages
        if m["role"] == "user"
        for b in m["content"]
        if b.get("type") == "text" and b["text"].startswith("You were judged stuck")
    ]


def test_red_with_the_same_failures_three_times_hands_the_turn_to_reassess(retry: Any) -> None:
    turns = [
        [plan(), write(STILL_RED[0]), VERIFY],
        [write(STILL_RED[1]), VERIFY],
        [write(STILL_RED[2]), VERIFY],
        [write(FIXED), VERIFY],
        wrap_up(),
    ]
    ended: Retry = retry(turns, reassess=PLAN)
    [ask] = reassess_asks(ended)
    assert "the tests were red with the same failures 3 times in a row" in ask
    assert T1 in ask
    assert "REVERT" not in ask  # no state had more tests passing than the baseline
    [plan_block] = pinned(ended)
    assert PLAN in plan_block and "reverted" not in plan_block
    assert ended.run.session and ended.run.session.status == "completed"
    assert ended.output.ok


def test_the_same_file_rewritten_in_four_turns_with_no_change_in_outcome_trips(
    retry: Any,
) -> None:
    turns = [
        [plan(), write(STILL_RED[0])],
        [write(STILL_RED[1])],
        [write(STILL_RED[2])],
        [write(STILL_RED[0])],
        [write(FIXED), VERIFY],
        wrap_up(),
    ]
    ended: Retry = retry(turns, reassess=PLAN)
    [ask] = reassess_asks(ended)
    assert "code/pricing.py was rewritten in 4 turns with no change in the test outcome" in ask
    assert ended.output.ok


def test_a_test_that_starts_passing_resets_the_counts(retry: Any) -> None:
    # Three red turns on the same failures, then one more test passes: without the reset
    # the fourth rewrite (and the later reds) would trip.
    half_again = pricing("price_cents if qty == 1 else qty - price_cents")
    turns = [
        [plan(), write(STILL_RED[0]), VERIFY],
        [write(STILL_RED[1]), VERIFY],
        [write(HALF), VERIFY],
        [write(half_again), VERIFY],
        [write(FIXED), VERIFY],
        wrap_up(),
    ]
    ended: Retry = retry(turns, reassess=PLAN)
    assert reassess_asks(ended) == []
    assert ended.run.session and ended.run.session.turns == 7
    assert ended.output.ok


def test_reassess_can_revert_to_the_state_where_more_tests_passed(retry: Any) -> None:
    turns = [
        [plan(), write(FIXED), VERIFY],  # 4 of 4: the best state
        [write(WORSE[0]), VERIFY],  # 3 of 4, and the same failure twice more
        [write(WORSE[1]), VERIFY],
        [write(WORSE[2]), VERIFY],
        [VERIFY, call("update_runtime_state", step=5, total=6)],
        wrap_up(),
    ]
    ended: Retry = retry(turns, reassess=PLAN + "\nREVERT")
    [ask] = reassess_asks(ended)
    assert "More tests passed earlier than now (measured by the runtime): 4 of 4 tests " in ask
    assert "passed after turn 1; the last run passed 3 of 4." in ask
    [plan_block] = pinned(ended)
    assert "The runtime has reverted your files: 4 of 4 tests passed after turn 1" in plan_block
    assert ended.output.ok
    code = ended.store.unit_files(PID, UNIT).files["code/pricing.py"].decode()
    assert code == FIXED
