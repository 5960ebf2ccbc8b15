"""The Makefile's install step shows pip's progress, one readable line per step: `make demo`
and `make test` are not silent for the minute pip takes on a fresh clone."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _install_commands() -> list[str]:
    """The pip commands `make` runs to install (read from `make -n`, not from the file)."""
    shown = subprocess.run(["make", "-n", "-B", ".venv/.installed"], cwd=REPO, check=True,
                           capture_output=True, text=True, timeout=60).stdout
    return [line for line in shown.splitlines() if re.match(r"\S*/pip install ", line)]


def test_both_entry_points_install_through_the_same_step() -> None:
    makefile = (REPO / "Makefile").read_text()
    for target in ("demo", "lint", "test"):
        assert re.search(rf"^{target}: \$\(STAMP\)", makefile, re.M), target


def _commands(target: str) -> list[str]:
    """What `make` runs for target, as `make -n` shows it."""
    return subprocess.run(["make", "-n", target], cwd=REPO, check=True, capture_output=True,
                          text=True, timeout=60).stdout.splitlines()


def test_make_test_lints_as_make_lint_does_and_waits_for_mypy_before_the_suite() -> None:
    """ruff and mypy run in `make test` (mypy beside a collection pass): each lint command
    is there, and the suite starts only after the shell waited for mypy's exit status (the
    recipe line's status, so a type error stops make there)."""
    shown = "\n".join(_commands("test"))
    for command in _commands("lint"):
        assert command in shown, command
    assert re.search(r"mypy & types=\$!;.*wait \$types\n.*pytest -q -n", shown, re.S), shown


@pytest.mark.timeout(180)
def test_the_install_step_prints_pip_s_progress_as_plain_lines() -> None:
    """Each pip command as make runs it (with --dry-run, into the venv already here) says
    what it looks at, package by package, in plain lines a log keeps: no `\\r`, no colours."""
    commands = _install_commands()
    assert len(commands) == 2, commands
    for command in commands:
        assert not {"-q", "--quiet", "-qq"} & set(shlex.split(command)), command
        done = subprocess.run(f"{command} --dry-run", shell=True, cwd=REPO, text=True,
                              capture_output=True, timeout=150)
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        assert "\r" not in out and "\x1b" not in out
        said = [line for line in out.splitlines() if line.startswith(
            ("Requirement already satisfied:", "Collecting ", "Would install"))]
        assert said, out
        if "-e" in shlex.split(command):
            assert any(line.startswith("Requirement already satisfied: celery")
                       for line in said), out
