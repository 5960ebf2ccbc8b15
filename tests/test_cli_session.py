"""`devloop session run`: one session outside the fleet, its turns printed as they happen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.proctree import run_bounded

DEVLOOP = str(Path(sys.executable).parent / "devloop")


def session(project: Path, role: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_bounded(
        [DEVLOOP, "session", "run", "--project", str(project), "--unit", "todo-be",
         "--role", role, "--llm", "stub", *extra],
        timeout=300,
    )


def test_a_coder_then_a_tester_session_print_turns_and_their_output(todo_project: Path) -> None:
    coder = session(todo_project, "coder")
    assert coder.returncode == 0, coder.stderr
    assert coder.stdout.startswith("turn 1  (")
    assert "  append_coder_log: ok" in coder.stdout
    output = json.loads(coder.stdout[coder.stdout.index("{"):])
    assert output["ok"] is True and output["contract_match_sdd"] is True
    assert (todo_project / "units/todo-be/code/server.js").is_file()  # exported back

    tester = session(todo_project, "tester")
    assert tester.returncode == 0, tester.stderr
    result = json.loads(tester.stdout[tester.stdout.index("{"):])
    assert (result["run_id"], result["ok"], result["summary"]["failed"]) == ("run-1-1", False, 1)
    assert (todo_project / "units/todo-be/runs/run-1-1/result.json").is_file()


def test_a_mode_the_role_does_not_have_is_refused(todo_project: Path) -> None:
    done = session(todo_project, "tester", "--mode", "implement-everything")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        '--mode: tester: "implement-everything" is not a tester mode; fix: use one of test, '
        "retry, resume"
    )
