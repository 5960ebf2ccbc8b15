"""Files and directories only this user can reach, and the proof that one is ours.

A project folder may have been written by someone else (a cloned repository, a shared
dir), so nothing found in it is followed or believed on its name alone: a directory
counts as private when it is a real directory this user owns that no one else may
enter, a file when it is a regular file of this user's that no one else may read.
Writes never follow a link planted in place of the file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

from devloop.core.errors import DevLoopError, Problem

OTHERS = 0o077  # any permission for the group or the world


class NotPrivate(DevLoopError):
    """A path that must be this user's alone is not; the message names it and the fix."""


def dir_problem(path: Path) -> str | None:
    """Why `path` is not a directory only this user can enter, or None when it is."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    if st.st_mode & OTHERS:
        return f"has mode {stat.S_IMODE(st.st_mode):o}, so other users may enter it"
    return None


def socket_problem(path: Path) -> str | None:
    """Why `path` is not a unix socket this user made in a directory only it can enter."""
    problem = dir_problem(path.parent)
    if problem:
        return f"{path.parent} {problem}"
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be examined ({exc.strerror})"
    if not stat.S_ISSOCK(st.st_mode):
        return f"{path} is not a unix socket"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    return None


def make_private_dir(path: Path) -> Path:
    """Create `path` with mode 0700, or tighten this user's existing directory to 0700.

    A link in its place or another user's directory is refused (NotPrivate): DevLoop
    never writes through either.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        why = "is a symbolic link" if path.is_symlink() else f"is not a directory ({exc.strerror})"
        raise NotPrivate(str(Problem(str(path), "type", why, "remove it; DevLoop recreates it"))
                         ) from exc
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise NotPrivate(str(Problem(
                str(path), "owner", f"belongs to uid {st.st_uid}, not to you (uid "
                f"{os.geteuid()})", "remove it (DevLoop recreates it), or work on a copy "
                "of the project you own")))
        if st.st_mode & OTHERS:
            os.fchmod(fd, 0o700)
    finally:
        os.close(fd)
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace `path` with a 0600 file holding `data`, atomically.

    The new file is made beside it with O_EXCL and renamed over it, so a link planted at
    `path` is replaced, never written through.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_private(path: Path, limit: int = 4096) -> bytes | None:
    """The first `limit` bytes of this user's 0600 regular file at `path`, else None.

    None for a link, a fifo, a missing file, another user's file, or one others may read:
    such a file proves nothing about who wrote it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & OTHERS:
            return None
        return os.read(fd, limit)
    finally:
        os.close(fd)


def open_private_log(path: Path) -> int:
    """An fd appending to `path`, created 0600 (an existing file of ours is made 0600).

    A link, fifo or device in its place is refused with OSError, never written through.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = os.open(path, flags, 0o600)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    if st.st_uid == os.geteuid() and st.st_mode & OTHERS:
        os.fchmod(fd, 0o600)
    return fd


def remove_planted(directory: Path, depth: int = 1) -> list[str]:
    """Remove every link, fifo, device and other user's file in `directory`, and in its
    subdirectories `depth` levels down; make this user's files 0600 and dirs 0700.

    A server about to write its files there must not follow a link planted in their place
    (redis-server opens its AOF and temp files by name); return what was removed.
    """
    removed: list[str] = []
    for entry in os.scandir(directory):
        st = entry.stat(follow_symlinks=False)
        ours = st.st_uid == os.geteuid()
        if stat.S_ISSOCK(st.st_mode):
            continue  # the server's own start replaces a socket that is not provably its own
        if stat.S_ISDIR(st.st_mode):
            if ours and depth > 0:
                os.chmod(entry.path, 0o700)
                removed += [f"{entry.name}/{name}" for name in remove_planted(Path(entry.path),
                                                                               depth - 1)]
            continue  # another user's dir can only have been put here by root: leave it
        if stat.S_ISREG(st.st_mode) and ours:
            if st.st_mode & OTHERS:
                os.chmod(entry.path, 0o600)
            continue
        os.unlink(entry.path)
        removed.append(entry.name)
    return removed
