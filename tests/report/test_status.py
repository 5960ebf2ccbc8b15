"""Final unit status from loop events and the latest run."""

from __future__ import annotations

from devloop.report.final_status import UnitFacts, derive_statuses, unit_status
from tests.growth import LINEAR, per_item_growth


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


def test_marking_blocked_upstream_costs_the_same_per_unit_at_any_size() -> None:
    def project(n: int) -> tuple[dict[str, list[str]], dict[str, UnitFacts]]:
        ids = [f"u{i:05d}" for i in range(n)]
        graph = {u: [ids[i - 1]] if i % 50 else [] for i, u in enumerate(ids)}  # chains of 50
        # Every tenth unit blocked: each chain's units sit below several blocks.
        facts: dict[str, UnitFacts] = {u: (["loop_block"], False, True) for u in ids[::10]}
        return graph, facts

    assert per_item_growth(project, lambda p: derive_statuses(*p), 500, 5000) < LINEAR
    graph, facts = project(100)
    statuses = derive_statuses(graph, facts)
    assert [statuses[f"u{i:05d}"] for i in (0, 1, 9, 10, 49, 50)] == [
        "blocked", "blocked_upstream", "blocked_upstream", "blocked", "blocked_upstream",
        "blocked"]
