"""The live table and `devloop status` say why a unit waits or stopped."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from rich.console import Console
from rich.live import Live

from devloop.cli.run.live_view import WHY_LINES, HumanNotices, LiveView, Screen, print_status
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.status import ProjectStatus, UnitRow, project_status
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.fleet import fleet


def test_a_waiting_unit_shows_the_providers_error_and_a_blocked_one_its_reason(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    report, _ = enqueue_project(redis_store, build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b")]))
    redis_store.put_state(report.pid, "a", UnitState(
        status="waiting_model", attempt=1, last_error="HTTP 529: Overloaded"))
    redis_store.put_state(report.pid, "b", UnitState(
        status="blocked", attempt=1, last_error="OSError: [Errno 28] No space left on device",
        blocked_reason="infrastructure: OSError: [Errno 28] No space left on device"))
    redis_store.client.set(redis_store.keys(report.pid).environment_error,
                           "bubblewrap cannot start")
    state = project_status(redis_store, report.pid)
    rows = {r.unit_id: r for r in state.units}
    assert rows["a"].last_error == "HTTP 529: Overloaded" and rows["a"].blocked_reason is None
    assert (rows["b"].blocked_reason or "").startswith("infrastructure: OSError")
    assert state.environment_error == "bubblewrap cannot start"
    console = Console(record=True, width=200)
    print_status(console, state)
    shown = console.export_text()
    assert "waiting_model" in shown and "HTTP 529: Overloaded" in shown
    assert "infrastructure: OSError: [Errno 28] No space left on device" in shown
    assert "1 waiting for the model" in shown
    assert "environment: bubblewrap cannot start" in shown


def status_of(units: list[UnitRow], scripted: bool = False) -> ProjectStatus:
    return ProjectStatus(pid="p-shop", units=units, scripted=scripted)


def row(unit: str, status: str, **more: object) -> UnitRow:
    fields: dict[str, object] = {"attempt": 1, "tokens": 12_345, "cost_usd": 0.0321,
                                 "elapsed_s": 4.2, **more}
    return UnitRow(unit_id=unit, status=status, **fields)  # type: ignore[arg-type]


def shown_at(width: int, state: ProjectStatus) -> list[str]:
    console = Console(record=True, width=width)
    print_status(console, state)
    return console.export_text().splitlines()


def header(lines: list[str]) -> str:
    return next(line for line in lines if "unit" in line and "status" in line)


def test_from_120_columns_a_column_shows_each_running_sessions_step() -> None:
    state = status_of([row("cart", "coding", step="coder 2/5, turn 3, Write"),
                       row("money", "passed")])
    wide = shown_at(120, state)
    assert "step" in header(wide) and any("coder 2/5, turn 3, Write" in line for line in wide)
    assert all(len(line) <= 120 for line in wide)
    narrower = shown_at(119, state)
    assert "step" not in header(narrower) and not any("turn 3" in line for line in narrower)


def test_at_60_columns_tokens_and_cost_go_before_unit_or_status_is_cut() -> None:
    state = status_of([
        row("inventory-report-builder", "blocked_upstream",
            reason="waits for stock-db, which is blocked"),
        row("stock-db", "blocked", reason="the same failure 3 times: tests/test_db.py::t got 1"),
    ])
    # (At 100 the reason's room to be read comes first: cost makes way for it.)
    assert "tokens" in header(shown_at(120, state)) and "cost $" in header(shown_at(120, state))
    lines = shown_at(60, state)
    assert "tokens" not in header(lines) and "cost" not in header(lines), lines
    assert "why" in header(lines)
    assert any("inventory-report-builder" in ln and "blocked_upstream" in ln for ln in lines)
    assert all(len(line) <= 60 for line in lines)
    short = status_of([row("cart", "passed")])
    assert "tokens" in header(shown_at(61, short)) and "tokens" not in header(shown_at(60, short))


def test_stub_costs_are_labelled_scripted_in_the_table() -> None:
    shown = "\n".join(shown_at(100, status_of([row("money", "passed")], scripted=True)))
    assert "scripted $" in shown and "costs scripted (stub)" in shown
    plain = "\n".join(shown_at(100, status_of([row("money", "passed")])))
    assert "scripted" not in plain and "cost $" in plain


@pytest.mark.timeout(120)
def test_workers_keep_the_running_sessions_step_where_the_table_reads_it(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path,
    python_toolchain_dir: Path,
) -> None:
    plans = [UnitPlan("slow", coder_latency_ms={2: 4000})]
    with fleet(redis_store, redis_server.celery_url, build(tmp_path / "p", plans),
               script(plans), workers=1) as f:
        deadline = time.monotonic() + 120
        seen: list[str] = []
        # Its plan written (0 of 1 done), the first turn's last tool, the second turn waited
        # on (4 s): the step reaches that while the turn waits. Earlier polls may catch the
        # turn before its tools ran ("coder, turn 1"); the table shows each in turn.
        while (step := f.status().units[0].step) != "coder 0/1, turn 1, Write":
            assert time.monotonic() < deadline, f"the step never read the first turn's: {seen}"
            if step is not None and step not in seen:
                seen.append(step)
            time.sleep(0.05)
        assert all(s.startswith("coder") for s in seen), seen
        live = f.status().units[0]
        time.sleep(1)
        assert f.status().units[0].elapsed_s > live.elapsed_s  # a live step's time counts
        done = f.wait()
    assert done.all_passed and done.units[0].step is None
    console = Console(record=True, width=130)
    print_status(console, done)
    assert "step" in console.export_text()


FIRST_CAUSE = ("the same failure 3 times: tests/test_unit.py::test_value_returns_42 got 41 "
               "(attempt 1)")
STORY = (f"{FIRST_CAUSE}; then: validation failed: the coder's self-check found coder.log "
         "has no entry for attempt 4: call append_coder_log (attempts 2-4)")


def why_cell(lines: list[str], unit: str) -> list[str]:
    """The why cell's lines of a unit's row (the table's last column)."""
    cell: list[str] = []
    for line in lines:
        cells = line.split("│")
        if len(cells) < 3:
            continue
        first = cells[1].strip()
        if first == unit or (cell and first == ""):
            cell.append(cells[-2].strip())
        elif cell:
            break
    return cell


def test_at_80_columns_a_long_reason_is_cut_at_a_word_and_says_where_it_is_in_full() -> None:
    state = ProjectStatus(pid="p-fleet", folder="my project", units=[
        row("bad", "blocked", attempt=4, reason=STORY),
        row("after", "blocked_upstream", attempt=0, reason="waits for bad, which is blocked"),
        row("good", "passed", scripted=True)], scripted=True)
    lines = shown_at(80, state)
    assert all(len(line) <= 80 for line in lines), lines
    cell = why_cell(lines, "bad")
    assert 1 < len(cell) <= WHY_LINES, lines  # not 18 lines
    shown = " ".join(cell)
    assert shown.endswith("…") and "".join(FIRST_CAUSE.split()) in "".join(shown.split())
    # Cut between words: what is shown is the reason's beginning, up to a separator.
    kept = "".join(shown[:-1].split())
    prefix = next(STORY[:i] for i in range(len(STORY) + 1)
                  if "".join(STORY[:i].split()) == kept)
    assert STORY[len(prefix)] in " ;:,."
    assert why_cell(lines, "after") == ["waits for bad, which is blocked"]
    note = lines.index("… cut to fit; every reason in full:")
    assert lines[note + 1] == "  devloop status 'my project' --json"
    # Wide enough, the whole reason and no note.
    wide = shown_at(200, state)
    assert " ".join(why_cell(wide, "bad")) == STORY
    assert not any("cut to fit" in line for line in wide)


def terminal(height: int, width: int = 120) -> Console:
    """A recording console that is a terminal of height x width (the live view's bound)."""
    return Console(record=True, width=width, height=height, force_terminal=True,
                   file=io.StringIO(), color_system=None)


def test_at_ten_units_the_live_view_is_the_whole_table() -> None:
    state = status_of([row(f"unit-{i}", "passed" if i % 2 else "coding") for i in range(10)])
    whole = Console(record=True, width=120)
    print_status(whole, state)
    live = terminal(40)
    live.print(LiveView(state))
    assert live.export_text() == whole.export_text()


def test_on_a_short_terminal_the_table_keeps_the_rows_that_matter_and_counts_the_rest() -> None:
    units = [row(f"u{i:04d}", "pending" if i > 1800 else "passed") for i in range(2000)]
    units[1500] = row("u1500", "coding", step="coder 1/4, turn 2, Write")
    units[1600] = row("u1600", "coding")  # released, waiting for a worker
    units[7] = row("u0007", "blocked", reason="the same failure 3 times")
    state = ProjectStatus(pid="p-big", units=units, recent=["u0900", "u0901"])
    console = terminal(30)
    console.print(LiveView(state, footer="workers: 3/3 up"))
    lines = console.export_text().splitlines()
    assert len(lines) <= 30, lines
    text = "\n".join(lines)
    # Running, waiting for a person, changed last: in units.json order (not the queued).
    shown = [ln.split("│")[1].strip() for ln in lines if ln.startswith("│ u")]
    assert shown == ["u0007", "u0900", "u0901", "u1500"]
    assert "… 1,996 more units not shown: 1,796 passed, 199 pending, 1 coding" in text
    assert "1799/2000 units finished, 1798 passed, 1 blocked" in text  # every unit counted
    assert "needs a human: u0007 (blocked)" in text and "workers: 3/3 up" in text
    # A terminal too short even for those: the rows that matter most, and the count.
    short = terminal(12)
    short.print(LiveView(state, footer="workers: 3/3 up"))
    lines = short.export_text().splitlines()
    assert len(lines) <= 12, lines
    assert [ln.split("│")[1].strip() for ln in lines if ln.startswith("│ u")] == [
        "u0007", "u1500"]


def test_the_needs_a_human_line_names_ten_units_and_counts_the_others() -> None:
    state = status_of([row(f"u{i:02d}", "blocked") for i in range(25)])
    line = next(ln for ln in shown_at(400, state) if ln.startswith("needs a human"))
    assert line.endswith("u09 (blocked) and 15 more") and "u10" not in line


def test_the_lines_for_people_of_a_look_are_printed_with_one_redraw() -> None:
    # Fifty units blocked at once: one print above the view, not fifty (each print draws
    # the whole view again).
    state = status_of([row(f"u{i:02d}", "blocked", reason="stuck") for i in range(50)])
    console = terminal(200, width=200)
    with Live(LiveView(status_of([])), console=console, auto_refresh=False) as live:
        screen = Screen(live, HumanNotices())
        screen.show(state, True, "workers: 1/1 up")
        screen.show(state, False, "workers: 1/1 up")  # nothing new: nothing drawn
    text = console.export_text()
    assert text.count("needs a human: u") == 51  # 50 notices, and the view's own line
    # Drawn at the start, with the notices, and once more as the live display stops.
    assert text.count("units finished") == 3, text.count("units finished")


def test_the_view_is_drawn_at_most_once_a_second_and_a_change_is_never_lost() -> None:
    console = terminal(40)
    with Live(LiveView(status_of([])), console=console, auto_refresh=False) as live:
        screen = Screen(live, HumanNotices(), every_s=0.5)
        for i in range(5):  # five looks in a row, each with a change
            screen.show(status_of([row("cart", "coding", attempt=i + 1)]), True, "w")
        time.sleep(0.6)
        screen.show(status_of([row("cart", "coding", attempt=5)]), False, "w")
        frames = console.export_text().count("units finished")
        live.stop()
        assert frames == 1 + 2  # the start, the first look, the change drawn once due
