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
    assert re.search(r"^demo: \$\(STAMP\)", makefile, re.M)
    assert re.search(r"^lint: \$\(STAMP\)", makefile, re.M) and "test: lint" in makefile


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
