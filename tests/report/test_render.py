"""The report page: one static file, every text from the folder escaped, graceful when empty."""

from __future__ import annotations

import gc
import re
import shutil
import threading
from pathlib import Path

from devloop.report import build_report, write_report
from tests.conftest import EXAMPLES
from tests.report.folders import many_units
from tests.report.hostile import PAYLOADS, hostile_project


def test_the_report_names_what_the_run_did(todo_run: Path) -> None:
    html = build_report(todo_run)
    for text in (
        "p-todo",
        "todo-be",
        "todo-fe",
        "run-1-1",
        "run-2-1",
        "title_required",
        "retry coder",
        "Hint:",
        "Cause:",
        "fixed",
        "total",
    ):
        assert text in html, text
    assert html.count('data-unit="') == 3
    # todo-be's green at attempt 2 came from its attempt-1 tests re-run unchanged: the page
    # says on which code, and that no tester session (and no token) was needed.
    assert ("green on attempt 2&#39;s code: attempt 1&#39;s tests re-ran unchanged, no tester "
            "session needed (0 tokens)") in html
    assert html.count('data-step="') == 12
    # Each green run's tests were run against a hollow build, and proved every criterion.
    proofs = re.findall(r"data-adequacy>proves (\d+) of (\d+) criteria", html)
    assert len(proofs) == 3 and all(a == b for a, b in proofs), proofs
    # Every run that ran shows the coverage of code/ its tests measured.
    assert re.search(r"data-coverage>coverage of code/: lines \d+%, branches \d+%", html)


def test_the_page_is_self_contained(todo_run: Path) -> None:
    html = build_report(todo_run)
    assert not re.search(r"<(link|img|iframe|object|embed)\b", html)
    assert not re.search(r"\bsrc=", html)
    assert re.findall(r'href="([^"]*)"', html) == [
        f"#unit-{u}" for u in ("todo-be", "todo-fe", "todo-app")] * 2
    assert "http://" not in html and "https://" not in html
    assert html.count("<script") == 1 and html.count("<style") == 1


def test_model_written_text_is_escaped_everywhere(tmp_path: Path) -> None:
    html = build_report(hostile_project(tmp_path / "evil"))
    for payload in PAYLOADS:
        assert payload not in html, payload
    assert "&lt;script&gt;alert(&#34;fix&#34;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert html.count("<script") == 1 and html.count("<style") == 1
    assert not re.search(r"<(img|iframe|svg onload|a href=\"http)", html)


def test_a_project_that_never_ran_shows_the_graph_and_says_so(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "todo", tmp_path / "todo")
    html = build_report(tmp_path / "todo")
    assert "This project has not run yet" in html
    assert html.count('data-unit="') == 3 and 'data-status="pending"' in html
    assert 'id="timeline-section"' not in html and 'data-step="' not in html


def test_write_report_writes_the_page_and_creates_its_folder(
    todo_run: Path, tmp_path: Path
) -> None:
    out = write_report(todo_run, tmp_path / "deep" / "report.html")
    assert out.read_text(encoding="utf-8") == build_report(todo_run)
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]


def test_a_report_is_built_without_the_cyclic_gc_walking_its_objects(tmp_path: Path) -> None:
    folder = many_units(tmp_path / "p", 200)
    # Collections this thread set off (another thread of the worker, left by an earlier
    # test, may set one off the moment the report turns the collector back on). Built with
    # the collector on, this report sets off about 60.
    here, started = threading.get_ident(), []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and threading.get_ident() == here:
            started.append(info["generation"])

    gc.callbacks.append(watch)
    try:
        build_report(folder)
    finally:
        gc.callbacks.remove(watch)
    # At most the one the collector owes when it is turned back on, as the build ends.
    assert len(started) <= 1, started
    assert gc.isenabled()  # as it was before
    gc.disable()
    try:
        build_report(folder)
        assert not gc.isenabled()
    finally:
        gc.enable()
