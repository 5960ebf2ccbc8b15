"""A unit's code/ holds source, not artifacts (issue 26, items 9 and 10): a `.git` a coder
session plants is refused at commit, named to the model and never written back to the
folder; a `.pyc` already in a folder being imported never reaches a test run."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from devloop.core.config import Settings
from devloop.fleet.records import steps_of
from devloop.fleet.steps import run_step
from devloop.project.load import load_project
from devloop.roles.workspace import Workspace
from devloop.runners import PytestRunner
from devloop.sandbox import BwrapSandbox
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, coder_turns
from tests.fleet.chain import chains
from tests.plant import (
    MONEY,
    MONEY_TESTS,
    git_status_runs_fsmonitor,
    plant_git_command,
    plant_pyc,
)


def _planting_coder(unit: str, marker: Path) -> dict[str, Any]:
    """The builder's good coder session, whose first turn also plants code/.git with Bash,
    and which finishes again (unchanged) whenever its self-check is handed back."""
    turns = coder_turns(UnitPlan(unit))
    turns = {n: turns[n] for n in (1, 2, 3)}
    turns[1]["content"].append(
        {"tool_use": {"name": "Bash", "input": {"command": plant_git_command(marker)}}})
    turns[4], turns[5] = copy.deepcopy(turns[3]), copy.deepcopy(turns[3])
    return {"sessions": {f"coder.*.{unit}": {"turns": turns},
                         "*.reassess.*": {"default": {"content": [{"text": "Re-read it."}]}}},
            "default": {"content": [{"text": "Nothing scripted."}]}}


@pytest.mark.timeout(300)
def test_a_git_dir_a_coder_plants_is_refused_named_and_never_written_back(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    # Item 10: a coder-planted .git with core.fsmonitor was committed and written back, and
    # `git status` in that folder ran the command as root.
    marker = tmp_path / "fsmonitor-ran"
    project = build(tmp_path / "p", [UnitPlan("u")])
    with chains(redis_store, settings, project, _planting_coder("u", marker)) as c:
        run_step("coder", c.env, c.dispatches[0].msg)
        handed_back = [json.dumps(r.body) for r in c.stub.requests
                       if r.session_key.startswith("coder") and r.turn == 4]
    # Written back as `devloop run` does, then a person runs git in the unit's code.
    redis_store.export(c.pid, project, as_source=True)
    code = project / "units/u/code"
    assert not git_status_runs_fsmonitor(code, marker)
    assert (code / "unit.py").is_file() and not (code / ".git").exists()
    assert not [rel for rel in redis_store.unit_files(c.pid, "u").files if ".git" in rel]
    [coder] = [r for r in steps_of(redis_store, c.pid, ["u"])["u"] if r.role == "coder"]
    refused = [v for v in coder.output["sandbox_violations"] if "code/.git/" in v]
    assert refused == ["units/u/code/.git/: version-control metadata (.git), not source: "
                       "nothing under it is read or committed; delete it"]
    assert coder.output["files_written"] == ["code/unit.py", "coder.log", "contract.json"]
    # The model was told in the same session, by its self-check, with the rule.
    assert handed_back and "files that are not source, never committed" in handed_back[0]
    assert "units/u/code/.git/" in handed_back[0]


@pytest.mark.timeout(120)
def test_a_pyc_in_a_folder_being_imported_is_left_out_and_the_reviewed_source_runs(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    # Item 9, from a cloned folder: code/__pycache__/money.cpython-311.pyc compiled from
    # other source (unchecked hash) sat beside the reviewed money.py.
    project = build(tmp_path / "p", [UnitPlan("money")])
    code = project / "units/money/code"
    code.mkdir(parents=True)
    (code / "money.py").write_text(MONEY)
    (project / "units/money/tests").mkdir()
    (project / "units/money/tests/test_money.py").write_text(MONEY_TESTS)
    planted = plant_pyc(code, python_toolchain_dir / "bin/python")
    report = redis_store.import_project(load_project(project))
    assert report.dropped == ["units/money/code/__pycache__/: a bytecode cache (__pycache__), "
                              "not source"]
    assert sorted(redis_store.unit_files("p-fleet", "money").files) == [
        "code/money.py", "spec.json", "tests/test_money.py"]
    ws = Workspace(redis_store, "p-fleet", "money", "tester", 1, settings=settings,
                   run_id="run-1")
    try:
        view = ws.materialize()
        assert not list(view.rglob("__pycache__"))
        out = PytestRunner(BwrapSandbox(settings), python_toolchain_dir).run(
            view=view, unit_id="money", run_id="run-1", attempt=1, retry_budget_left=4)
    finally:
        ws.cleanup()
    assert (out.result.ok, out.result.summary.passed) == (True, 1), out.stdout
    assert planted.is_file()  # the user's folder is theirs: left as it was
