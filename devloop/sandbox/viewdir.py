"""Session views on the host: made where only the sandbox can reach them, locked while
they live, and always removed, even when the process that made one was killed.

The process that makes a view holds an flock on it for the view's life, through an
O_CLOEXEC descriptor (sandboxed commands do not inherit it). A process killed with
SIGKILL cannot remove its view, but the kernel releases its lock: making a new view
sweeps views older than a minute whose lock can be taken, at most once a minute per
process and views dir.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import stat
import tempfile
import time
from pathlib import Path

from devloop.core.config import Settings
from devloop.core.errors import Problem
from devloop.safe.cachedir import cache_root
from devloop.safe.private import NotPrivate
from devloop.safe.safedir import Dir
from devloop.safe.safetree import remove_tree

log = logging.getLogger(__name__)

SUFFIX = ".view"  # only dirs named like this are ever swept
SWEEP_EVERY_S = 60.0
DEAD_AFTER_S = 60.0  # younger views are left alone: their maker may not hold the lock yet
_LOCK = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_locks: dict[str, int] = {}
_last_sweep: dict[str, float] = {}


def views_root(settings: Settings) -> Path:
    """The directory views are made in: the worker's, entered only by its sandboxes."""
    path = settings.views_dir or cache_root(settings) / "views"
    return private_views(path, settings.sandbox_gid if os.geteuid() == 0 else None)


def private_views(path: Path, gid: int | None) -> Path:
    """path as this user's dir, 0710 with group gid (a root worker's sandboxes run in that
    group: bubblewrap opens their binds as them) or 0700 (sandboxes run as this user).

    A live view's name shows in `ps` (bubblewrap's arguments), so no one else may enter
    this dir: not another local user, nor a `nobody` process writing into a write set
    that belongs to uid 65534. Another user's dir here is refused (NotPrivate).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise NotPrivate(str(Problem(
                str(path), "owner", f"belongs to uid {st.st_uid}, not to you (uid "
                f"{os.geteuid()})", "remove it (DevLoop recreates it), or set "
                "DEVLOOP_VIEWS_DIR to a dir of your own")))
        if gid is not None and st.st_gid != gid:
            os.fchown(fd, -1, gid)
        mode = 0o710 if gid is not None else 0o700
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def make_view(settings: Settings, prefix: str = "view-") -> Path:
    """A fresh, locked scratch dir for a view, somewhere the sandbox uid can reach.

    Views must not live under a 0700 directory (pytest's tmp_path, /root): bubblewrap
    opens bind sources as the unprivileged uid.
    """
    views = views_root(settings)
    last = _last_sweep.get(str(views))
    if last is None or time.monotonic() - last >= SWEEP_EVERY_S:
        _last_sweep[str(views)] = time.monotonic()
        sweep(views)
    # The prefix names a unit: whatever it holds, the view stays a direct child of views.
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", prefix)[:80]
    view = Path(tempfile.mkdtemp(prefix=safe, suffix=SUFFIX, dir=views))
    view.chmod(0o755)
    fd = os.open(view, _LOCK)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    _locks[str(view)] = fd
    return view


def remove_view(view: Path) -> None:
    """Remove a view (whatever the session left in it) and release its lock."""
    try:
        with Dir.open(view.parent) as parent:
            remove_tree(parent, view.name)
    finally:
        fd = _locks.pop(str(view), None)
        if fd is not None:
            os.close(fd)


def sweep(views: Path, dead_after_s: float = DEAD_AFTER_S) -> list[str]:
    """Remove views whose maker is gone (lock free, older than dead_after_s); their names."""
    for path, fd in list(_locks.items()):
        if os.fstat(fd).st_nlink == 0:  # removed by someone else: forget its lock
            os.close(_locks.pop(path))
    removed: list[str] = []
    with Dir.open(views) as root, os.scandir(root.fd) as entries:
        candidates = [
            e.name
            for e in entries
            if e.name.endswith(SUFFIX)
            and e.is_dir(follow_symlinks=False)
            and str(views / e.name) not in _locks
            and time.time() - e.stat(follow_symlinks=False).st_mtime >= dead_after_s
        ]
        for name in candidates:
            try:
                fd = os.open(name, _LOCK, dir_fd=root.fd)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # its maker is alive
            try:
                remove_tree(root, name)
                removed.append(name)
            except OSError:
                log.exception("could not remove the abandoned view %s", views / name)
            finally:
                os.close(fd)
    if removed:
        log.warning("removed %d abandoned view(s) in %s: %s", len(removed), views, removed)
    return removed
