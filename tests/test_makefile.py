"""The Makefile's install step shows what it installs, one readable line per package:
`make demo` and `make test` are not silent while a fresh clone's venv is made."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _install_commands() -> list[str]:
    """The commands `make` runs to install (read from `make -n`, not from the file)."""
    shown = subprocess.run(["make", "-n", "-B", ".venv/.installed"], cwd=REPO, check=True,
                           capture_output=True, text=True, timeout=60).stdout
    return [line for line in shown.splitlines() if re.match(r"\S*/(pip|uv pip) install ", line)]


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
def test_the_install_step_prints_plain_lines_a_log_keeps() -> None:
    """pip installs uv, and uv installs DevLoop with every dependency: each command as make
    runs it (with --dry-run, into the venv already here) says what it looks at in plain
    lines, no `\\r` and no colours, and uv resolves the whole project, not part of it."""
    pip, uv = _install_commands()
    for command in (pip, uv):
        assert not {"-q", "--quiet", "-qq"} & set(shlex.split(command)), command
    said = _dry_run(pip)
    assert any(line.startswith(("Requirement already satisfied: uv", "Collecting uv"))
               for line in said), said
    lines = _dry_run(uv)
    resolved = [line for line in lines if line.startswith("Resolved ")]
    assert resolved, lines
    assert int(resolved[0].split()[1]) > 50  # celery, anthropic, pytest and all they need


def _dry_run(command: str) -> list[str]:
    """What an install command prints, both streams, run with --dry-run."""
    done = subprocess.run(f"{command} --dry-run", shell=True, cwd=REPO, text=True,
                          capture_output=True, timeout=150)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "\r" not in out and "\x1b" not in out, out
    return out.splitlines()
