"""Timeline geometry: lanes per worker and per unit, a seconds axis, labelled bars."""

from __future__ import annotations

from pathlib import Path

from devloop.fleet.records import StepRecord
from devloop.report import gather
from devloop.report.gantt import LABEL_W, PLOT_W, BarLabel, gantt_layout, worker_of
from tests.growth import LINEAR, per_item_growth
from tests.report.folders import Folder, blocked_story, many_units


def test_one_lane_per_worker_process_and_one_bar_per_step(todo_run: Path) -> None:
    data = gather(todo_run)
    gantt = gantt_layout(data.steps, [u.id for u in data.units])
    assert len(gantt.bars) == len(data.steps) == 12
    workers = {worker_of(s) for s in data.steps}
    assert {lane.key for lane in gantt.worker_lanes} == workers
    assert all(w.count(":") == 1 for w in workers)  # host:pid, the task id cut off
    assert [lane.key for lane in gantt.unit_lanes] == ["todo-be", "todo-fe", "todo-app"]


def test_bars_of_one_worker_never_overlap(todo_run: Path) -> None:
    data = gather(todo_run)
    gantt = gantt_layout(data.steps, [u.id for u in data.units])
    for lane in gantt.worker_lanes:
        bars = sorted((b for b in gantt.bars if worker_of(b.step) == lane.key), key=lambda b: b.x)
        for a, b in zip(bars, bars[1:], strict=False):
            assert a.step.ended_at <= b.step.started_at


def test_the_axis_starts_at_the_first_send_and_spans_the_plot(tmp_path: Path) -> None:
    folder = Folder(tmp_path).units({"a": []})
    folder.step("a", "coder", 1, 2.0, 4.0, sent=0.0)
    folder.step("a", "tester", 1, 4.0, 10.0)
    data = gather(tmp_path)
    gantt = gantt_layout(data.steps, ["a"])
    coder, tester = gantt.bars
    assert gantt.span_s == 10.0
    assert coder.wait_x == LABEL_W and coder.x == LABEL_W + PLOT_W * 0.2
    assert tester.x + tester.w == LABEL_W + PLOT_W
    assert gantt.ticks[0] == (LABEL_W, "0s") and gantt.ticks[-1] == (LABEL_W + PLOT_W, "10s")


def test_bars_are_labelled_unit_and_attempt_and_tester_outcomes_are_kept(tmp_path: Path) -> None:
    data = gather(blocked_story(tmp_path))
    gantt = gantt_layout(data.steps, [u.id for u in data.units])
    testers = [b for b in gantt.bars if b.step.role == "tester"]
    assert [(b.label, b.outcome) for b in testers if b.step.msg.unit_id == "b"] == [
        ("b #1", "red"),
        ("b #2", "red"),
        ("b #3", "red"),
    ]
    assert all(b.label_worker.at == "in" and b.label_worker.text == b.label for b in testers)
    assert all(b.label_worker.at == "none" for b in gantt.bars if b.step.role == "decide")
    assert len(gantt.worker_lanes) == 2
    assert [lane.key for lane in gantt.unit_lanes] == ["a", "b", "d"]


def test_placing_every_label_costs_the_same_per_step_at_any_size(tmp_path: Path) -> None:
    def steps(n: int) -> tuple[list[StepRecord], list[str]]:
        data = gather(many_units(tmp_path / str(n), n // 3))
        return data.steps, [u.id for u in data.units]

    assert per_item_growth(steps, lambda s: gantt_layout(*s), 600, 6000, tries=2) < LINEAR


def test_a_label_goes_right_only_when_the_next_bar_of_its_lane_leaves_room(
    tmp_path: Path,
) -> None:
    folder = Folder(tmp_path).units({"unit-with-a-long-name": []})
    folder.step("unit-with-a-long-name", "coder", 1, 0.0, 0.2)
    folder.step("unit-with-a-long-name", "tester", 1, 0.2, 0.4)  # right after: no room
    folder.step("unit-with-a-long-name", "coder", 2, 30.0, 30.2)  # nothing after it
    data = gather(tmp_path)
    first, second, last = gantt_layout(data.steps, ["unit-with-a-long-name"]).bars
    assert first.label_worker.at == "none" and second.label_worker.at == "right"
    assert last.label_worker == last.label_unit == BarLabel("right", "#2")  # the short one
