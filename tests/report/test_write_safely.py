"""`devloop report DIR -o DIR/report.html`, as a run prints it, writes nothing through a
link or fifo planted in a folder someone else wrote (issue 26, item 11)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.cli.run.live_view import epilogue
from devloop.fleet.status import ProjectStatus
from tests.workers.printed import harvest, run_printed

SECRET = "nobody else's\n"


@pytest.fixture
def victim() -> Iterator[Path]:
    """A file outside the folder that a planted link points at."""
    home = Path(tempfile.mkdtemp(prefix="devloop-test-victim-"))
    (home / "secret").write_text(SECRET)
    yield home / "secret"
    shutil.rmtree(home, ignore_errors=True)


def printed_report(folder: Path) -> str:
    """The report command the end of a run prints for this folder."""
    text = "\n".join(epilogue(ProjectStatus(pid="p-todo", units=[]), str(folder)))
    return next(c for c in harvest(text) if c.startswith("devloop report "))


def plant(path: Path, kind: str, victim: Path) -> None:
    """A link to the victim, or a fifo, at path."""
    if kind == "link":
        path.symlink_to(victim)
    else:
        os.mkfifo(path)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_planted_temporary_is_never_written_through(
    todo_project: Path, victim: Path, kind: str
) -> None:
    # The name the report was written through before, planted in the clone.
    planted = todo_project / ".report.html.tmp"
    plant(planted, kind, victim)
    done = run_printed(printed_report(todo_project), cwd=todo_project.parent, timeout=60)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == SECRET
    report = todo_project / "report.html"
    assert not report.is_symlink() and "<html" in report.read_text()
    assert planted.is_symlink() if kind == "link" else planted.is_fifo()
    assert not [p.name for p in todo_project.glob(".report.html.*.tmp")]  # none left


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_planted_report_is_refused_with_exit_2_and_left_as_it_was(
    todo_project: Path, victim: Path, kind: str
) -> None:
    report = todo_project / "report.html"
    plant(report, kind, victim)
    done = run_printed(printed_report(todo_project), cwd=todo_project.parent, timeout=60)
    assert done.returncode == 2, (done.stdout, done.stderr)
    line = done.stderr.strip()
    assert line.startswith(f"{report}: -o: is a {'symlink' if kind == 'link' else 'fifo'}")
    assert "fix: remove it, or pass -o with a path of your own" in line
    assert victim.read_text() == SECRET
    assert report.is_symlink() if kind == "link" else report.is_fifo()
