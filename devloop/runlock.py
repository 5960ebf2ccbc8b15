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
from collections.abc import Iterator
from pathlib import Path

from devloop.embedded import private_state_dir
from devloop.errors import DevLoopError

LOCK = "run.lock"


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
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise FolderBusy(project_dir, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # the lock goes with it
