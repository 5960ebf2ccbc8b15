"""Pytest plugin: the suite leaves nothing behind, or the run fails.

At the start the run gets a marker in its environment, which every process it starts
inherits (Redis servers, Celery workers, `devloop` subprocesses, browsers), and a views
directory of its own. At the end every process still carrying the marker and every view
left in that directory is listed, removed, and fails the run: a leak in one test must not
pass unnoticed.

Under parallel workers (`pytest -n N`) each worker is a run of its own (its own marker and
views directory), checks what its tests left when it ends, and hands the list to the main
process, which reports them all and fails the run.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from devloop.core.config import load_settings
from devloop.safe.cachedir import cache_root
from tests.proctree import Proc, carrying, kill_tree

MARKER = "DEVLOOP_TEST_RUN"
# Children get this long to finish exiting after the last test before they count as left.
GRACE_S = 10.0
_views: Path | None = None
_from_workers: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    global _views
    worker = getattr(config, "workerinput", {}).get("workerid")
    # A worker inherits the main process's marker and extends it: its own tests' processes
    # are its own to check, and its siblings' tests never look like its leftovers.
    run = f"{os.environ[MARKER]}-{worker}" if worker else f"{os.getpid()}-{int(time.time())}"
    os.environ[MARKER] = run
    settings = load_settings()
    base = settings.views_dir or cache_root(settings) / "views"
    # Under the shared views dir (the sandbox uid can enter it), one dir per pytest run so
    # parallel runs on one machine do not see each other's views.
    _views = base / f"pytest-{run}"
    os.environ["DEVLOOP_VIEWS_DIR"] = str(_views)


def _still_running(config: pytest.Config) -> list[Proc]:
    """Processes of this run that outlive GRACE_S (the parallel workers, which carry the main
    process's marker and end after this hook, do not count)."""
    workers = config.pluginmanager.has_plugin("dsession")
    deadline = time.monotonic() + GRACE_S
    while True:
        left = [proc for proc in carrying(MARKER, os.environ[MARKER])
                if not (workers and proc.ppid == os.getpid())]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """A parallel worker ended: keep what it found left behind."""
    _from_workers.extend(getattr(node, "workeroutput", {}).get("leftovers", []))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    problems: list[str] = list(_from_workers)
    for proc in _still_running(session.config):
        problems.append(f"process left running: {proc}")
        kill_tree(proc.pid)
    if _views is not None and _views.exists():
        left = sorted(p.name for p in _views.iterdir())
        problems += [f"view left behind: {_views / name}" for name in left]
        shutil.rmtree(_views, ignore_errors=True)
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["leftovers"] = problems  # the main process reports them
    if problems:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.section("leftovers", sep="=", red=True, bold=True)
            for line in problems:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@contextmanager
def views_of_killed_processes() -> Iterator[None]:
    """Views made inside the block are removed when it ends: for tests that SIGKILL a
    process mid-session, which cannot clean up after itself."""
    views = Path(os.environ["DEVLOOP_VIEWS_DIR"])
    before = set(os.listdir(views)) if views.exists() else set()
    try:
        yield
    finally:
        for name in set(os.listdir(views) if views.exists() else ()) - before:
            shutil.rmtree(views / name, ignore_errors=True)
