"""The unit graph: problems with cycles spelled out, order, depth and critical path."""

import pytest

from devloop.core import dag
from tests.growth import LINEAR, per_item_growth


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


def _layers(n: int) -> dict[str, list[str]]:
    """n units in layers of 50, each depending on the unit before it in the layer before and
    on that layer's first unit (so everything past the first layer is downstream of u00000)."""
    ids = [f"u{i:05d}" for i in range(n)]
    return {u: sorted({ids[i - 50], ids[i - 50 - i % 50]}) if i >= 50 else []
            for i, u in enumerate(ids)}


def test_a_deep_chain_is_checked_without_recursion() -> None:
    # Each unit depends on the next, so the walk from the first id goes 5,000 deep.
    chain = {f"u{i:05d}": [f"u{i + 1:05d}"] if i < 4999 else [] for i in range(5000)}
    assert dag.check_graph(chain) == []
    assert dag.critical_path(chain, dict.fromkeys(chain, 1.0))[0] == 5000


@pytest.mark.parametrize("walk", ["order", "levels", "critical_path", "downstream_of_all"])
def test_graph_walks_cost_the_same_per_unit_at_any_size(walk: str) -> None:
    def work(graph: dict[str, list[str]]) -> object:
        if walk == "order":
            return dag.topological_order(graph)
        if walk == "levels":
            return dag.levels(graph)
        if walk == "critical_path":
            return dag.critical_path(graph, dict.fromkeys(graph, 1.0))
        users = dag.dependents(graph)  # once, as callers that walk from many units do
        return [dag.downstream(graph, u, users) for u in list(graph)[:5]]

    assert per_item_growth(_layers, work, 500, 5000) < LINEAR
