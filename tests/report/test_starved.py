"""A starved test run is shown as the machine's doing, with where its time went."""

from __future__ import annotations

from pathlib import Path

from devloop.core.models import RunResult, RunSummary
from devloop.report import build_report
from tests.report.folders import Folder


def test_a_starved_run_reads_as_a_busy_machine_not_a_red_run(tmp_path: Path) -> None:
    folder = Folder(tmp_path / "p").units({"a": []})
    starved = RunResult(
        run_id="run-1-1", unit_id="a", attempt=1, ok=False, starved=True,
        starved_reason="the machine was too busy to run the tests: pytest got 1.2 s",
        summary=RunSummary(), next_action="retry_tester",
        wall_s=180.0, cpu_s=0.4, wait_s=171.5, duration_ms=180_000,
    )  # fmt: skip
    run_dir = folder.root / "units/a/runs/run-1-1"
    run_dir.mkdir(parents=True)
    (run_dir / "result.json").write_text(starved.to_json_text())
    folder.run("a", 1, True, tester_try=2)
    html = build_report(folder.root)
    assert "starved (busy machine)" in html and "data-starved" in html
    assert "the machine was too busy to run the tests" in html
    assert "0.4s CPU, 171.5s waiting for a CPU" in html
    assert html.count('class="red">red<') == 0 and "crashed</span>" not in html
