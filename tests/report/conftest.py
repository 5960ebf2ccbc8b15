"""Fixtures for report tests: one real `devloop run` per session, and real headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES
from tests.proctree import run_bounded
from tests.report.browser import Chromium

CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def _find_chromium() -> str | None:
    return next((p for p in CHROMIUM_PATHS if os.access(p, os.X_OK)), shutil.which("chromium"))


def _apt_install_chromium() -> str:
    """Install Debian's chromium as root; return what went wrong, or "" on success."""
    if os.geteuid() != 0:
        return "chromium is not installed and this user is not root (run apt-get as root)"
    if shutil.which("apt-get") is None:
        return "chromium is not installed and apt-get is not available"
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=900,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        if done.returncode != 0:
            return f"`{' '.join(command)}` exited {done.returncode}: {done.stderr[-2000:]}"
    return ""


def chromium_path(needed_by: str) -> str:
    """Debian Chromium's executable, apt-installed when missing; FAILS (never skips) the
    tests of needed_by if it cannot be."""
    path = _find_chromium()
    if path is None:
        problem = _apt_install_chromium()
        path = _find_chromium()
        if path is None:
            pytest.fail(f"headless Chromium is required for the {needed_by} tests: {problem}")
    return path


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Chromium:
    """Headless Debian Chromium, apt-installed when missing; FAILS (never skips) if it cannot be."""
    return Chromium(chromium_path("report"), tmp_path_factory.mktemp("chromium"))


@pytest.fixture(scope="session")
def todo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/todo after a real `devloop run --llm stub` (todo-be red, then green)."""
    root = tmp_path_factory.mktemp("todo-run") / "todo"
    shutil.copytree(EXAMPLES / "todo", root)
    devloop = Path(sys.executable).with_name("devloop")
    done = run_bounded(
        [str(devloop), "run", str(root), "--llm", "stub", "--workers", "2"], timeout=900
    )
    assert done.returncode == 0, (
        f"devloop run exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return root


@pytest.fixture
def run_copy(todo_run: Path, tmp_path: Path) -> Path:
    """A private copy of the session's run folder, to break."""
    dest = tmp_path / "run"
    shutil.copytree(todo_run, dest, ignore=shutil.ignore_patterns(".devloop"))
    return dest
