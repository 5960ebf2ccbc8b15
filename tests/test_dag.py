"""The unit graph: problems with cycles spelled out, order, depth and critical path."""

import pytest

from devloop import dag


def test_unknown_and_self_dependencies_are_reported() -> None:
    issues = dag.check_graph({"a": ["a", "ghost"], "b": []})
    assert [(i.kind, i.unit, i.dependency) for i in issues] == [
        ("self_dependency", "a", "a"),
        ("unknown_dependency", "a", "ghost"),
    ]


def test_cycle_is_spelled_out() -> None:
    issues = dag.check_graph({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]})
    assert [i.cycle_text for i in issues] == ["a -> b -> c -> a"]


def test_two_separate_cycles_are_both_found_once() -> None:
    graph = {"a": ["b"], "b": ["a"], "x": ["y"], "y": ["z"], "z": ["x"]}
    assert sorted(i.cycle_text for i in dag.check_graph(graph)) == [
        "a -> b -> a",
        "x -> y -> z -> x",
    ]


def test_topological_order_puts_prerequisites_first_and_is_stable() -> None:
    graph = {"fe": ["be"], "be": ["db"], "db": [], "docs": []}
    # Kahn with the smallest ready id first.
    assert dag.topological_order(graph) == ["db", "be", "docs", "fe"]


def test_topological_order_refuses_a_cycle() -> None:
    with pytest.raises(ValueError, match="cycle"):
        dag.topological_order({"a": ["b"], "b": ["a"]})


def test_levels_and_ready_units() -> None:
    graph = {"db": [], "be": ["db"], "fe": ["be", "db"], "cli": []}
    assert dag.levels(graph) == {"cli": 1, "db": 1, "be": 2, "fe": 3}
    assert dag.ready_units(graph, passed=[], started=[]) == ["cli", "db"]
    assert dag.ready_units(graph, passed=["db"], started=["db", "cli"]) == ["be"]


def test_critical_path_uses_weights_not_unit_count() -> None:
    graph = {"a": [], "b": ["a"], "c": ["b"], "slow": [], "d": ["slow"]}
    length, path = dag.critical_path(graph, {"a": 1, "b": 1, "c": 1, "slow": 10, "d": 1})
    assert (length, path) == (11, ["slow", "d"])


def test_dependents_lists_users() -> None:
    assert dag.dependents({"a": [], "b": ["a"], "c": ["a"]}) == {"a": ["b", "c"], "b": [], "c": []}
