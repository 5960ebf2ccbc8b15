"""A blocked unit's reason names the first cause of the chain of attempts that led to the
block, then the later ones, each once with its attempts. Pure: step records in, words out."""

from __future__ import annotations

from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepOutcome, StepRecord
from devloop.fleet.why import attempt_words, blocked_by_code, blocked_words, chain, story
from devloop.store import UnitState

SAME = "the same failure 3 times"
GOT_404 = ("tests/test_notes.py::test_get_note", "GET /notes/1 returned 404")
UNLOGGED = "coder.log has no entry for attempt {}: call append_coder_log"


def _step(role: str, attempt: int, n: int, **fields: object) -> StepRecord:
    msg = StepMsg(pid="p-why", unit_id="notes", attempt=attempt)
    return StepRecord(role=role, attempt=attempt, msg=msg, worker="w", started_at=float(n),
                      ended_at=float(n) + 0.5, **fields)  # type: ignore[arg-type]


def red(attempt: int, failures: list[tuple[str, str]], decision: str) -> list[StepRecord]:
    """An attempt whose code was tested red, and the loop's decision on it."""
    n = attempt * 10
    return [_step("coder", attempt, n, outcome=StepOutcome()),
            _step("tester", attempt, n + 1, outcome=StepOutcome(tester_ran=True,
                                                                 failures=failures)),
            _step("decide", attempt, n + 2, status=decision)]


def unlogged(attempt: int, decision: str) -> list[StepRecord]:
    """An attempt whose coder failed its own self-check (bookkeeping, not the code)."""
    n = attempt * 10
    ended = StepOutcome(status="failed", reason="validation_failed",
                        summary=UNLOGGED.format(attempt))
    return [_step("coder", attempt, n, outcome=ended),
            _step("tester", attempt, n + 1, outcome=StepOutcome()),
            _step("decide", attempt, n + 2, status=decision)]


def test_a_real_failure_then_bookkeeping_is_told_first_cause_first() -> None:
    steps = (red(1, [GOT_404], "retry_coder") + unlogged(2, "retry_coder")
             + unlogged(3, "retry_coder") + unlogged(4, "block"))
    assert chain(steps, 4) == [1, 2, 3, 4]
    assert story(SAME, steps, 4) == (
        f"{SAME}: {GOT_404[0]} got {GOT_404[1]} (attempt 1); then: validation failed: the "
        f"coder's self-check found {UNLOGGED.format(4)} (attempts 2-4)"
    )


def test_the_chain_starts_after_the_attempt_a_person_or_a_pass_ended() -> None:
    # Attempt 2 was blocked; a person's unblock started attempt 3, which failed twice more.
    steps = (red(1, [GOT_404], "retry_coder") + unlogged(2, "block")
             + red(3, [("t", "500")], "retry_coder") + red(4, [("t", "500")], "block"))
    assert chain(steps, 4) == [3, 4]
    assert story("retry budget of 5 attempts spent", steps, 4) == (
        "retry budget of 5 attempts spent: t got 500 (attempts 3-4)")
    # A pass ends it too: a re-test of passed code starts a chain of its own.
    passed = red(1, [], "pass") + red(2, [("t", "1")], "block")
    assert chain(passed, 2) == [2]


def test_failures_that_come_back_are_told_once_with_every_attempt() -> None:
    a, b = [("t", "41")], [("t", "40")]
    steps = (red(1, a, "retry_coder") + red(2, b, "retry_coder") + red(3, a, "retry_coder")
             + red(4, [("t", "None")], "block"))
    assert story("retry budget of 4 attempts spent", steps, 4) == (
        "retry budget of 4 attempts spent: t got 41 (attempts 1, 3); then: t got 40 "
        "(attempt 2); t failed (attempt 4)")


def test_a_tester_retry_within_an_attempt_does_not_end_the_chain() -> None:
    first = red(1, [GOT_404], "retry_tester") + [
        _step("decide", 1, 13, status="retry_coder", tester_try=2)]
    steps = first + unlogged(2, "block")
    assert chain(steps, 2) == [1, 2]


def test_without_step_records_the_loops_rule_is_the_reason() -> None:
    assert story(SAME, [], 3) == SAME
    state = UnitState(status="blocked", attempt=3, blocked_reason=SAME)
    assert blocked_words(state, []) == SAME


def test_blocks_that_name_their_own_cause_are_left_as_they_are() -> None:
    steps = red(1, [GOT_404], "retry_coder") + red(2, [GOT_404], "block")
    for kind, said in [("infrastructure", "infrastructure: OSError: disk full"),
                       ("model", "model unavailable: HTTP 529"),
                       ("tester", "the tester failed: a fixture is missing"),
                       ("cancelled", "cancelled by ann")]:
        state = UnitState(status="blocked", attempt=2, blocked_reason=said,
                          extra={"block_kind": kind})
        assert blocked_words(state, steps) == said
    code = UnitState(status="blocked", attempt=2, blocked_reason=SAME)
    assert blocked_words(code, steps) == f"{SAME}: {GOT_404[0]} got {GOT_404[1]} (attempts 1-2)"


def test_a_folders_records_tell_a_block_by_the_code_from_the_others() -> None:
    steps = red(1, [GOT_404], "retry_coder") + red(2, [GOT_404], "block")
    assert blocked_by_code(steps, 2) and not blocked_by_code(steps, 1)
    by_tester = red(1, [], "retry_coder")[:-1] + [
        _step("decide", 1, 12, status="block", output={"block_kind": "tester"})]
    assert not blocked_by_code(by_tester, 1)
    assert not blocked_by_code([], 1)


def test_attempts_read_as_ranges() -> None:
    assert attempt_words([1]) == "attempt 1"
    assert attempt_words([2, 3, 4, 5]) == "attempts 2-5"
    assert attempt_words([1, 2, 4]) == "attempts 1-2, 4"
