"""Paths resolved beneath a directory fd without ever following a link.

The kernel does it where it can: `openat2` (x86-64 and aarch64 syscall 437, through libc's
`syscall`) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, probed once
per process. Elsewhere the path is opened one component at a time, each directory with
O_NOFOLLOW | O_DIRECTORY and the last with O_NOFOLLOW. Either way a failure caused by a
link, an escape or a non-directory on the way is a `Refused` naming it.

    OSError
    +-- Refused        a path that will not be touched: `.path` (relative) and `.reason`
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import stat

from devloop.core.errors import DevLoopError

OPEN = os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW
DIR = os.O_RDONLY | os.O_DIRECTORY | OPEN
# openat2(2): RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH.
_RESOLVE = 0x02 | 0x04 | 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())


class Refused(DevLoopError, OSError):
    """A path a Dir will not touch, and why ("is a symlink", "is a fifo", ...)."""

    def __init__(self, path: str, reason: str, code: int = errno.EPERM) -> None:
        super().__init__(code, f"{path}: {reason}")
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


def describe(mode: int) -> str:
    """What kind of file a mode is, as a refusal names it."""
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a fifo"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a device"


def parts_of(rel: str) -> list[str]:
    """The components of a path relative to a handle; Refused for absolute, `..`, NUL."""
    if "\x00" in rel:
        raise Refused(repr(rel), "contains a NUL byte")
    if rel.startswith("/"):
        raise Refused(rel, "is absolute: only paths inside the directory are allowed")
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused(rel, "escapes the directory (..)")
    return parts


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_kernel_resolves: bool | None = None


def _openat2(dirfd: int, path: str, flags: int, mode: int) -> int:
    """openat2(dirfd, path, {flags, mode, RESOLVE_*}) through libc's syscall(2)."""
    assert _SYS_OPENAT2 is not None
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, _RESOLVE)
    fd = _libc.syscall(
        ctypes.c_long(_SYS_OPENAT2),
        ctypes.c_long(dirfd),
        ctypes.c_char_p(os.fsencode(path)),
        ctypes.byref(how),
        ctypes.c_size_t(ctypes.sizeof(how)),
    )
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), path)
    return int(fd)


def kernel_resolves() -> bool:
    """Whether this kernel has openat2 with RESOLVE_BENEATH (probed once per process)."""
    global _kernel_resolves
    if _kernel_resolves is None:
        _kernel_resolves = False
        if _SYS_OPENAT2 is not None:
            root = os.open("/", DIR)
            try:
                os.close(_openat2(root, ".", DIR, 0))
                _kernel_resolves = True
            except OSError:  # ENOSYS; EPERM from a seccomp filter that does not know it
                pass
            finally:
                os.close(root)
    return _kernel_resolves


def open_beneath(dirfd: int, rel: str, flags: int, mode: int = 0, *, kernel: bool) -> int:
    """An fd for `rel` beneath dirfd, opened without following any link."""
    parts = parts_of(rel)
    # O_PATH takes no other flags (openat2 refuses them with EINVAL).
    flags = flags | OPEN if not flags & os.O_PATH else flags | os.O_CLOEXEC | os.O_NOFOLLOW
    if not parts:
        return os.open(".", flags | os.O_DIRECTORY, dir_fd=dirfd)
    if kernel:
        try:
            return _openat2(dirfd, "/".join(parts), flags, mode)
        except OSError as exc:
            raise refusal(dirfd, rel, parts, exc) from None
    parent = _walk_to(dirfd, rel, parts[:-1])
    try:
        return os.open(parts[-1], flags, mode, dir_fd=parent)
    except OSError as exc:
        raise refusal(dirfd, rel, parts, exc) from None
    finally:
        if parent != dirfd:
            os.close(parent)


def _walk_to(dirfd: int, rel: str, parts: list[str]) -> int:
    """An fd on the directory `parts` names, opened one O_NOFOLLOW component at a time."""
    fd = dirfd
    for part in parts:
        try:
            nxt = os.open(part, DIR, dir_fd=fd)
        except OSError as exc:
            raise refusal(dirfd, rel, parts_of(rel), exc) from None
        finally:
            if fd != dirfd:
                os.close(fd)
        fd = nxt
    return fd


def refusal(dirfd: int, rel: str, parts: list[str], exc: OSError) -> OSError:
    """The exception for a failed open: a Refused naming the link or escape, else exc."""
    if exc.errno == errno.EXDEV:
        return Refused(rel, "escapes the directory", exc.errno)
    if exc.errno == errno.ENXIO:
        return Refused(rel, "is a fifo or socket", exc.errno)
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
        exc.filename = rel
        return exc
    for i in range(1, len(parts) + 1):
        st = _lstat_quiet(dirfd, parts[:i])
        if st is not None and stat.S_ISLNK(st.st_mode):
            via = "/".join(parts[:i])
            reason = "is a symlink" if i == len(parts) else f"passes through a symlink ({via})"
            return Refused(rel, reason, errno.ELOOP)
        if st is not None and i < len(parts) and not stat.S_ISDIR(st.st_mode):
            return Refused(rel, f"{'/'.join(parts[:i])} is not a directory", errno.ENOTDIR)
    exc.filename = rel
    return exc


def _lstat_quiet(dirfd: int, parts: list[str]) -> os.stat_result | None:
    """lstat through O_NOFOLLOW parents, None on any failure (for error messages)."""
    try:
        parent = _walk_to(dirfd, "/".join(parts), parts[:-1])
    except OSError:
        return None
    try:
        return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
    except OSError:
        return None
    finally:
        if parent != dirfd:
            os.close(parent)
