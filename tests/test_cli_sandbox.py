"""`devloop sandbox exec`: the wall as a user sees it, through the real command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fleet.builder import UnitPlan, build, script
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
    manifests = list((todo_project / ".devloop/appendonlydir").glob("*.manifest"))
    assert manifests, "the AOF's manifest is kept"
    again = sandbox_exec(todo_project, "coder", "cat code/a.js")
    assert again.returncode == 0 and again.stdout == "hi\n"


@pytest.mark.timeout(120)
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
        'units.json: units: no unit "nope"; fix: pick one of todo-be, todo-fe, todo-app'
    )
    near = sandbox_exec_at(todo_project, "todo-fee", "true")
    assert near.returncode == 2
    assert near.stderr.strip() == 'units.json: units: no unit "todo-fee"; did you mean "todo-fe"?'


def sandbox_exec_at(project: Path, unit: str, command: str) -> subprocess.CompletedProcess[str]:
    """The project as the first argument, like every other command."""
    return run_bounded([DEVLOOP, "sandbox", "exec", str(project), "--unit", unit, "--role",
                        "coder", "--", "sh", "-c", command], timeout=120)


@pytest.mark.timeout(120)
def test_a_committed_write_is_written_back_and_outlives_a_run_and_an_edit(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    plans = [UnitPlan("cart")]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    ran = run_bounded([DEVLOOP, "run", str(project), "--llm", "stub", "--workers", "1"],
                      timeout=300, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    # What was reported: the second exec after a run did not see the first one's write.
    first = sandbox_exec_at(project, "cart", 'echo "# x" >> code/unit.py')
    assert first.returncode == 0, first.stderr
    assert "committed: code/unit.py (unit version " in first.stderr
    assert first.stderr.rstrip().endswith(f"; written to {project}")
    assert (project / "units/cart/code/unit.py").read_text().endswith("# x\n")
    second = sandbox_exec_at(project, "cart", "tail -1 code/unit.py")
    assert second.stdout == "# x\n", second.stderr
    # The folder holds the commit, so an edit of it builds on the write instead of undoing it.
    (project / "units/cart/NOTES.md").write_text("mine\n")
    third = sandbox_exec_at(project, "cart", "tail -1 code/unit.py; cat NOTES.md")
    assert third.stdout == "# x\nmine\n", third.stderr
