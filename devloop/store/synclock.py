"""One sync at a time between a project folder and Redis: an flock in the folder's `.devloop/`.

An import reads the folder to find the user's edits and an export writes it; interleaved
(a `devloop pull` or `enqueue` beside a live run), the import could read a half-written
folder after the export had already said what it wrote. So both hold this lock while they
touch the folder. Its holders are short (one export), so a waiter waits for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from devloop.core.errors import DevLoopError
from devloop.safe.private import NotPrivate
from devloop.server.embedded import STATE_DIR, private_state_dir

LOCK = "sync.lock"
WAIT_S = 300.0
log = logging.getLogger(__name__)


class SyncStuck(DevLoopError):
    """Another process held the folder's sync lock for longer than any sync takes."""


@contextlib.contextmanager
def folder_synced(
    folder: Path, wait_s: float = WAIT_S, *, create: bool = True
) -> Iterator[None]:
    """Hold the folder's sync lock for the block, waiting up to wait_s for it; without
    `create`, only in a folder that has a `.devloop/` already (every exporter makes one)."""
    if not create and not os.path.lexists(Path(folder) / STATE_DIR):
        yield
        return
    try:
        fd = os.open(private_state_dir(folder) / LOCK,
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (NotPrivate, OSError) as exc:
        # A folder DevLoop keeps no state in (read-only, or not this user's to keep it in)
        # is synced as before the lock: only two DevLoop commands at once could interleave.
        log.debug("%s: syncing without the folder lock (%s)", folder, exc)
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise SyncStuck(
                        f"{folder}/.devloop/{LOCK}: another DevLoop command has held it for "
                        f"{wait_s:.0f} s, longer than any sync takes; let it finish or stop it"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # the lock goes with it
