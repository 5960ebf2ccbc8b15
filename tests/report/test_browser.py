"""The report in real headless Chromium: the drawn DOM after scripts ran, and a screenshot."""

from __future__ import annotations

import struct
from pathlib import Path

from devloop.report import write_report
from tests.conftest import REPO
from tests.report.browser import Chromium, Elements
from tests.report.folders import blocked_story
from tests.report.hostile import EVIL_UNIT, hostile_project

SCREENSHOT = REPO / "bench" / "out" / "report.png"
BLOCKED_SCREENSHOT = SCREENSHOT.with_name("report-blocked.png")


def test_chromium_draws_every_unit_node_and_step_bar(
    chromium: Chromium, todo_run: Path, tmp_path: Path
) -> None:
    page = write_report(todo_run, tmp_path / "report.html")
    dom = Elements(chromium.dump_dom(page))
    assert dom.named("body")[0].get("data-ready") == "1"  # the page's script ran
    nodes = dom.having("data-unit")
    assert [(n["data-unit"], n["data-status"]) for n in nodes] == [
        ("todo-be", "passed"),
        ("todo-fe", "passed"),
        ("todo-app", "passed"),
    ]
    bars = dom.having("data-step")
    roles = sorted(str(b["data-step"]) for b in bars)
    assert roles == ["coder"] * 4 + ["decide"] * 4 + ["tester"] * 4
    assert [(e["data-from"], e["data-to"]) for e in dom.having("data-edge")] == [
        ("todo-be", "todo-fe"), ("todo-be", "todo-app")
    ]
    assert len(dom.having("data-cost-unit")) == 3


def test_the_by_unit_link_regroups_the_bars_into_unit_lanes(
    chromium: Chromium, tmp_path: Path
) -> None:
    page = write_report(blocked_story(tmp_path / "blocked"), tmp_path / "report.html")
    dom = Elements(chromium.dump_dom(page, "#by-unit"))
    bars = dom.having("data-step")
    assert bars and all(b["transform"] == f"translate(0,{b['data-y-unit']})" for b in bars)
    assert any(b["data-y-unit"] != b["data-y-worker"] for b in bars)
    statuses = {n["data-unit"]: n["data-status"] for n in dom.having("data-unit")}
    assert statuses == {
        "a": "passed",
        "b": "blocked",
        "c": "blocked_upstream",
        "d": "passed",
        "e": "blocked_upstream",
        "f": "pending",
    }


def test_injected_markup_stays_text_in_the_browser(chromium: Chromium, tmp_path: Path) -> None:
    page = write_report(hostile_project(tmp_path / "evil"), tmp_path / "report.html")
    dom = Elements(chromium.dump_dom(page))
    assert dom.named("img") == [] and dom.named("iframe") == []
    assert len(dom.named("script")) == 1 and len(dom.named("style")) == 1
    assert not [a for _, a in dom.tags if any(k.startswith("on") for k in a)]
    assert [n["data-unit"] for n in dom.having("data-unit")] == ["ok", EVIL_UNIT]


def test_a_screenshot_of_the_real_run_is_written(chromium: Chromium, todo_run: Path) -> None:
    page = write_report(todo_run, SCREENSHOT.with_name("report.html"))
    _assert_png(chromium.screenshot(page, SCREENSHOT, 1400, 1800), 1400, 1800)


def test_a_screenshot_of_a_blocked_project_is_written(chromium: Chromium, tmp_path: Path) -> None:
    page = write_report(blocked_story(tmp_path / "blocked"), tmp_path / "report.html")
    _assert_png(chromium.screenshot(page, BLOCKED_SCREENSHOT, 1400, 1100), 1400, 1100)


def _assert_png(path: Path, width: int, height: int) -> None:
    """A PNG of that size with real content (a blank page compresses to a few kB)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (width, height)
    assert len(data) > 50_000
