"""The folder's run lock: one live run, and a read-only probe of who holds it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devloop.project.runlock import FolderBusy, folder_lock, live_run


def test_the_probe_names_the_live_runs_pid_and_nothing_once_it_ended(tmp_path: Path) -> None:
    assert live_run(tmp_path) is None and not (tmp_path / ".devloop").exists()
    with folder_lock(tmp_path):
        assert live_run(tmp_path) == str(os.getpid())
        with pytest.raises(FolderBusy), folder_lock(tmp_path):
            pass
    assert live_run(tmp_path) is None
    with folder_lock(tmp_path):  # a probe leaves the lock free for the next run
        pass


def test_a_fifo_planted_as_the_lock_is_no_run_and_does_not_hang_the_probe(
    tmp_path: Path,
) -> None:
    (tmp_path / ".devloop").mkdir(mode=0o700)
    os.mkfifo(tmp_path / ".devloop" / "run.lock")
    assert live_run(tmp_path) is None
