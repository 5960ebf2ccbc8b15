"""`devloop session run`: one session outside the fleet, its turns printed as they happen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.proctree import run_bounded

DEVLOOP = str(Path(sys.executable).parent / "devloop")


def session(project: Path, role: str, *extra: str, unit: str = "todo-be",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_bounded(
        [DEVLOOP, "session", "run", "--project", str(project), "--unit", unit,
         "--role", role, "--llm", "stub", *extra],
        timeout=300, env=env,
    )


@pytest.mark.timeout(120)
def test_a_coder_then_a_tester_session_print_turns_and_their_output(todo_project: Path) -> None:
    # The project comes first, as in every other command (--project stays an alias).
    coder = run_bounded([DEVLOOP, "session", "run", str(todo_project), "--unit", "todo-be",
                         "--role", "coder", "--llm", "stub"], timeout=300)
    assert coder.returncode == 0, coder.stderr
    assert coder.stdout.startswith("turn 1  (")
    assert "  append_coder_log: ok" in coder.stdout
    # File tools name the file they acted on.
    assert "  Write code/service.js: ok\n  Write code/server.js: ok" in coder.stdout
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


def test_no_api_key_and_no_stub_is_exit_2_naming_the_variable(todo_project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    done = run_bounded([DEVLOOP, "session", "run", str(todo_project), "--unit", "todo-be",
                        "--role", "coder"], timeout=120, env=env)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "ANTHROPIC_API_KEY: environment: not set; fix: export your Anthropic API key, or run "
        "with --llm stub (scripted turns from DIR/stub.yaml or --script FILE)"
    ]
    assert done.stdout == "" and not (todo_project / ".devloop").exists()


def test_an_unknown_unit_is_one_line_with_the_unit_it_meant(todo_project: Path) -> None:
    done = session(todo_project, "coder", unit="todo-bee")
    assert done.returncode == 2
    assert done.stderr.splitlines() == ['units.json: units: no unit "todo-bee"; did you mean '
                                        '"todo-be"?']
    assert "Traceback" not in done.stdout + done.stderr
