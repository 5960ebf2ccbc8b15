"""Removing a directory entry and everything under it, by file descriptors alone.

Iterative (a 1,000-deep tree would hit Python's recursion limit) and one open directory
at a time, so depth never costs file descriptors; it descends by name and climbs by `..`,
never following a link, and refuses a directory moved while it is being emptied.
`Dir.write_atomic` and `safetree.remove_tree` both build on it.
"""

from __future__ import annotations

import errno
import os
import stat

from devloop.safe.beneath import Refused

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def remove_entry(parent_fd: int, name: str) -> None:
    """Remove the entry name of parent_fd's directory and everything under it (a file or
    link: just it); missing is fine. Directories the sandbox made unreadable or unwritable
    are given back to their owner first."""
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        _empty(parent_fd, name)
        os.rmdir(name, dir_fd=parent_fd)
    else:
        os.unlink(name, dir_fd=parent_fd)


def _empty(parent_fd: int, top: str) -> None:
    """Remove everything inside parent/top, descending by name and climbing by `..`."""
    fd = _enter(parent_fd, top)
    # (name in its parent, subdirectories still to empty, (dev, ino) of its parent)
    frames = [(top, _clear(fd), _identity(parent_fd))]
    try:
        while frames:
            name, pending, parent_id = frames[-1]
            if pending:
                child = pending.pop()
                here = _identity(fd)
                try:
                    sub = _enter(fd, child)
                except FileNotFoundError:
                    continue
                os.close(fd)
                fd = sub
                frames.append((child, _clear(fd), here))
                continue
            frames.pop()
            if not frames:
                break
            up = os.open("..", _DIR, dir_fd=fd)
            os.close(fd)
            fd = up
            if _identity(fd) != parent_id:
                raise Refused(name, "its directory was moved while it was being removed")
            os.rmdir(name, dir_fd=fd)
    finally:
        os.close(fd)


def _enter(parent_fd: int, name: str) -> int:
    """Open a subdirectory to empty it, making it usable by its owner first if needed."""
    try:
        fd = os.open(name, _DIR, dir_fd=parent_fd)
    except PermissionError:
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        try:
            os.chmod(f"/proc/self/fd/{path_fd}", 0o700)
        finally:
            os.close(path_fd)
        fd = os.open(name, _DIR, dir_fd=parent_fd)
    st = os.fstat(fd)
    if st.st_mode & 0o700 != 0o700 and st.st_uid == os.geteuid():
        os.fchmod(fd, 0o700)
    return fd


def _clear(fd: int) -> list[str]:
    """Unlink every non-directory in fd's directory; return its subdirectory names."""
    subdirs = []
    with os.scandir(fd) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if is_dir:
            subdirs.append(name)
            continue
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        except IsADirectoryError:  # it became a directory since the listing
            subdirs.append(name)
        except OSError as exc:
            if exc.errno != errno.EISDIR:
                raise
            subdirs.append(name)
    return subdirs


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino
