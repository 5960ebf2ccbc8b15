"""`devloop sandbox exec`: the wall as a user sees it, through the real command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.proctree import run_bounded

DEVLOOP = str(Path(sys.executable).parent / "devloop")


def sandbox_exec(project: Path, role: str, command: str) -> subprocess.CompletedProcess[str]:
    return run_bounded(
        [DEVLOOP, "sandbox", "exec", "--project", str(project), "--unit", "todo-be",
         "--role", role, "--", "sh", "-c", command],
        timeout=120,
    )


def test_coder_write_commits_and_the_exit_code_is_the_commands(todo_project: Path) -> None:
    done = sandbox_exec(todo_project, "coder", "echo hi > code/a.js; exit 7")
    assert done.returncode == 7, done.stderr
    assert "committed: code/a.js" in done.stderr
    # The embedded Redis was stopped and its AOF kept for the next command.
    assert (todo_project / ".devloop/appendonly.aof").exists()
    again = sandbox_exec(todo_project, "coder", "cat code/a.js")
    assert again.returncode == 0 and again.stdout == "hi\n"


def test_tester_cannot_write_code_and_coder_cannot_write_tests(todo_project: Path) -> None:
    assert sandbox_exec(todo_project, "coder", "echo ok > code/server.js").returncode == 0
    tester = sandbox_exec(todo_project, "tester", "echo x > code/server.js")
    assert tester.returncode != 0 and "Read-only file system" in tester.stderr
    coder = sandbox_exec(todo_project, "coder", "mkdir -p tests && echo x > tests/t.js")
    assert coder.returncode != 0
    listing = sandbox_exec(todo_project, "coder", "ls code tests 2>&1; true")
    assert "t.js" not in listing.stdout
    assert sandbox_exec(todo_project, "coder", "cat code/server.js").stdout == "ok\n"


def test_a_rejected_write_exits_3_and_names_the_path(todo_project: Path) -> None:
    done = sandbox_exec(todo_project, "coder", "ln -s /etc/passwd code/link.js")
    assert done.returncode == 3
    assert "rejected: units/todo-be/code/link.js: symlink points outside the view" in done.stderr


def test_unknown_unit_is_an_input_error(todo_project: Path) -> None:
    done = run_bounded(
        [DEVLOOP, "sandbox", "exec", "--project", str(todo_project), "--unit", "nope",
         "--role", "coder", "--", "true"], timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        'units.json: units: no unit "nope"; fix: pick one of todo-be, todo-fe'
    )
