"""Final unit status from loop events and the latest run."""

from __future__ import annotations

from devloop.report.status import derive_statuses, unit_status


def test_the_last_loop_event_decides_over_earlier_ones() -> None:
    assert unit_status(["loop_retry_coder", "loop_block"], False, True) == "blocked"
    assert unit_status(["loop_block", "loop_retry_coder", "loop_pass"], True, True) == "passed"
    assert unit_status(["loop_retry_tester"], None, True) == "in_progress"
    # Released by the loop: a green result.json alone does not pass it.
    assert unit_status(["loop_release"], True, False) == "in_progress"


def test_without_loop_events_the_latest_result_decides() -> None:
    assert unit_status([], True, True) == "passed"
    assert unit_status([], False, True) == "failed"
    assert unit_status([], None, True) == "in_progress"
    assert unit_status([], None, False) == "pending"


def test_units_downstream_of_a_block_are_blocked_upstream_unless_they_passed() -> None:
    graph = {"a": [], "b": ["a"], "c": ["b"], "d": ["a"], "e": ["c", "d"], "x": ["b"]}
    facts = {
        "a": (["loop_pass"], True, True),
        "b": (["loop_block"], False, True),
        "d": (["loop_pass"], True, True),
        "x": (["loop_pass"], True, True),  # passed before an unblock re-ran b: stays passed
    }
    assert derive_statuses(graph, facts) == {
        "a": "passed",
        "b": "blocked",
        "c": "blocked_upstream",
        "d": "passed",
        "e": "blocked_upstream",
        "x": "passed",
    }
