"""One live `devloop run` per project folder: a lock its process holds in `.devloop/`.

The lock is an flock on `.devloop/run.lock` (0600, this user's), which the kernel drops
with the process however it ends; the file names the pid that holds it. A second run on
the folder is refused, naming that pid and how to watch or stop it, before it touches
Redis, the workers or the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from devloop.core.errors import DevLoopError
from devloop.server.embedded import STATE_DIR, private_state_dir

LOCK = "run.lock"
TAKE_S = 1.0  # a `live_run` probe holds the lock shared for microseconds: wait that out


class FolderBusy(DevLoopError):
    """Another live run holds the project folder."""

    def __init__(self, folder: Path, pid: str) -> None:
        self.folder, self.pid = folder, pid
        super().__init__(
            f"{folder}: a `devloop run` (pid {pid or '?'}) is live on this folder; watch it with "
            f"`devloop status {folder}` (or its console), stop it with Ctrl-C in its terminal "
            f"or `devloop cancel {folder}`; a second run on one folder is refused"
        )


@contextlib.contextmanager
def folder_lock(project_dir: Path) -> Iterator[None]:
    """Hold the folder's run lock for the block; FolderBusy when another run holds it."""
    state = private_state_dir(project_dir)
    fd = os.open(state / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if not _take(fd):
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise FolderBusy(project_dir, holder)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def _take(fd: int) -> bool:
    """Take the lock exclusively, waiting out a probe's shared hold; False: a run has it."""
    deadline = time.monotonic() + TAKE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


def live_run(project_dir: Path) -> str | None:
    """The pid of the `devloop run` live on the folder ("?" if it wrote none); None: none.

    Read-only: nothing is created, and a lock file that is not a regular file is no run.
    """
    path = Path(project_dir) / STATE_DIR / LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
