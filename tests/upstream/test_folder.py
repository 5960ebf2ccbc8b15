"""What a folder shows passed is read beneath its handle: a run dir a session left as a link
is never followed."""

from __future__ import annotations

import json
from pathlib import Path

from devloop.upstream.folder import folder_status, latest_run


def test_a_run_dir_planted_as_a_link_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "result.json").write_text(json.dumps({"run_id": "run-9-1", "ok": True}))
    runs = tmp_path / "p/units/u/runs"
    (runs / "run-1-1").mkdir(parents=True)
    (runs / "run-1-1/result.json").write_text(json.dumps({"run_id": "run-1-1", "ok": False}))
    (runs / "run-9-1").symlink_to(elsewhere)
    assert latest_run(tmp_path / "p", "u") == {"run_id": "run-1-1", "ok": False}
    assert folder_status(tmp_path / "p", "u") == "its latest run (run-1-1) is not green"
    assert folder_status(tmp_path / "p", "nope") == "it has no test run yet"
