"""DAG geometry: level columns, left-to-right edges, long edges around other boxes."""

from __future__ import annotations

from devloop.core import dag
from devloop.report.layout import NODE_W, dag_layout

DIAMOND_AND_SKIP = {"a": [], "b": ["a"], "c": ["b"], "d": ["a"], "e": ["c", "d"], "f": []}


def test_units_sit_in_one_column_per_dependency_level() -> None:
    layout = dag_layout(DIAMOND_AND_SKIP, dag.levels(DIAMOND_AND_SKIP))
    x = {n.unit: n.x for n in layout.nodes}
    assert x["a"] == x["f"] < x["b"] == x["d"] < x["c"] < x["e"]
    assert [n.unit for n in layout.nodes] == list(DIAMOND_AND_SKIP)


def test_every_edge_runs_from_the_dependency_rightwards_to_the_dependent() -> None:
    layout = dag_layout(DIAMOND_AND_SKIP, dag.levels(DIAMOND_AND_SKIP))
    boxes = {n.unit: n for n in layout.nodes}
    assert {(e.source, e.target) for e in layout.edges} == {
        ("a", "b"),
        ("b", "c"),
        ("a", "d"),
        ("c", "e"),
        ("d", "e"),
    }
    for edge in layout.edges:
        start = edge.d.split()[0]  # "Mx,y"
        assert float(start[1:].split(",")[0]) == boxes[edge.source].x + NODE_W
        end_x = float(edge.d.split()[-1].split(",")[0])
        assert end_x < boxes[edge.target].x


def test_an_edge_that_skips_a_level_does_not_cross_the_box_in_between() -> None:
    layout = dag_layout(DIAMOND_AND_SKIP, dag.levels(DIAMOND_AND_SKIP))
    c = next(n for n in layout.nodes if n.unit == "c")
    d_to_e = next(e for e in layout.edges if (e.source, e.target) == ("d", "e"))
    assert " L" in f" {d_to_e.d}"  # it runs straight through a waypoint slot
    straight = d_to_e.d.split(" L")[1].split()[0]
    y = float(straight.split(",")[1])
    assert not c.y <= y <= c.y + c.h


def test_boxes_never_overlap_and_fit_the_drawing() -> None:
    graph = {f"u{i}": [f"u{j}" for j in range(i) if (i + j) % 3 == 0] for i in range(12)}
    layout = dag_layout(graph, dag.levels(graph))
    for a in layout.nodes:
        assert a.x >= 0 and a.x + a.w <= layout.width and a.y >= 0 and a.y + a.h <= layout.height
        for b in layout.nodes:
            if a is not b:
                assert a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y
