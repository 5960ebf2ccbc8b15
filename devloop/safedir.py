"""`Dir`: a directory handle through which nothing outside it, and no link, is reachable.

Host code handles what a hostile session left in its view (any path may be a symlink, a
fifo, a device) only through a `Dir`: it receives a handle, never a path string, so
"outside" is not expressible. Every path is resolved beneath the handle's directory fd
without following a link: by the kernel (`openat2` with RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS) where it has it, else component by
component with O_NOFOLLOW. Files open non-blocking (a fifo never blocks a thread) and
anything but a regular file is refused after fstat. Writes go to an O_CREAT | O_EXCL
temporary in the target's own directory, renamed over the target.

    OSError
    +-- Refused        a path a Dir will not touch: `.path` (relative) and `.reason`
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import secrets
import stat
from pathlib import Path

READ_CAP = 16 * 1024 * 1024
_OPEN = os.O_CLOEXEC | os.O_NOCTTY | os.O_NOFOLLOW
_DIR = os.O_RDONLY | os.O_DIRECTORY | _OPEN
# openat2(2): RESOLVE_NO_MAGICLINKS | RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH.
_RESOLVE = 0x02 | 0x04 | 0x08
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(platform.machine())


class Refused(OSError):
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
            root = os.open("/", _DIR)
            try:
                os.close(_openat2(root, ".", _DIR, 0))
                _kernel_resolves = True
            except OSError:  # ENOSYS; EPERM from a seccomp filter that does not know it
                pass
            finally:
                os.close(root)
    return _kernel_resolves


class Dir:
    """A handle on one directory; every verb takes a path relative to it."""

    def __init__(self, fd: int, name: str, *, kernel: bool | None = None) -> None:
        self.fd, self.name = fd, name
        # None: use openat2 when the kernel has it; False: resolve component by component.
        self.kernel = kernel_resolves() if kernel is None else kernel

    @classmethod
    def open(cls, path: Path | str, *, kernel: bool | None = None) -> Dir:
        """A handle on a directory the caller names (its last component must not be a link)."""
        try:
            fd = os.open(path, _DIR)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(path):
                raise Refused(str(path), "is a symlink", errno.ELOOP) from None
            raise
        return cls(fd, str(path), kernel=kernel)

    def close(self) -> None:
        """Close the handle (idempotent)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Dir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "fd", -1) >= 0:
            self.close()

    def __repr__(self) -> str:
        return f"Dir({self.name!r})"

    # --- resolution -----------------------------------------------------------------

    def open_fd(self, rel: str, flags: int = os.O_RDONLY, mode: int = 0) -> int:
        """An fd for `rel` beneath this dir, opened without following any link."""
        parts = parts_of(rel)
        # O_PATH takes no other flags (openat2 refuses them with EINVAL).
        flags = flags | _OPEN if not flags & os.O_PATH else flags | os.O_CLOEXEC | os.O_NOFOLLOW
        if not parts:
            return os.open(".", flags | os.O_DIRECTORY, dir_fd=self.fd)
        if self.kernel:
            try:
                return _openat2(self.fd, "/".join(parts), flags, mode)
            except OSError as exc:
                raise self._refusal(rel, parts, exc) from None
        parent = self._walk_to(rel, parts[:-1])
        try:
            return os.open(parts[-1], flags, mode, dir_fd=parent)
        except OSError as exc:
            raise self._refusal(rel, parts, exc) from None
        finally:
            if parent != self.fd:
                os.close(parent)

    def _walk_to(self, rel: str, parts: list[str]) -> int:
        """An fd on the directory `parts` names, opened one O_NOFOLLOW component at a time."""
        fd = self.fd
        for part in parts:
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                raise self._refusal(rel, parts_of(rel), exc) from None
            finally:
                if fd != self.fd:
                    os.close(fd)
            fd = nxt
        return fd

    def _refusal(self, rel: str, parts: list[str], exc: OSError) -> OSError:
        """The exception for a failed open: a Refused naming the link or escape, else exc."""
        if exc.errno == errno.EXDEV:
            return Refused(rel, "escapes the directory", exc.errno)
        if exc.errno == errno.ENXIO:
            return Refused(rel, "is a fifo or socket", exc.errno)
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            exc.filename = rel
            return exc
        for i in range(1, len(parts) + 1):
            st = self._lstat_quiet(parts[:i])
            if st is not None and stat.S_ISLNK(st.st_mode):
                via = "/".join(parts[:i])
                reason = "is a symlink" if i == len(parts) else f"passes through a symlink ({via})"
                return Refused(rel, reason, errno.ELOOP)
            if st is not None and i < len(parts) and not stat.S_ISDIR(st.st_mode):
                return Refused(rel, f"{'/'.join(parts[:i])} is not a directory", errno.ENOTDIR)
        exc.filename = rel
        return exc

    def _lstat_quiet(self, parts: list[str]) -> os.stat_result | None:
        """lstat through O_NOFOLLOW parents, None on any failure (for error messages)."""
        try:
            parent = self._walk_to("/".join(parts), parts[:-1])
        except OSError:
            return None
        try:
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except OSError:
            return None
        finally:
            if parent != self.fd:
                os.close(parent)

    def opendir(self, rel: str) -> Dir:
        """A handle on the directory `rel` (the caller closes it)."""
        return Dir(self.open_fd(rel, os.O_RDONLY | os.O_DIRECTORY), f"{self.name}/{rel}",
                   kernel=self.kernel)

    def _parent(self, rel: str, *, create: bool = False) -> tuple[Dir, str]:
        """(handle on rel's directory, rel's last component); Refused for the dir itself."""
        parts = parts_of(rel)
        if not parts:
            raise Refused(rel or ".", "names the directory itself, not an entry in it")
        head = "/".join(parts[:-1])
        if create and head:
            self.mkdirs(head)
        return self.opendir(head), parts[-1]

    # --- verbs ----------------------------------------------------------------------

    def lstat(self, rel: str) -> os.stat_result | None:
        """The entry's own status (a link is not followed), or None when it is missing."""
        if not parts_of(rel):
            return os.fstat(self.fd)
        try:
            parent, name = self._parent(rel)
        except (FileNotFoundError, NotADirectoryError):
            return None
        with parent:
            try:
                return os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
            except FileNotFoundError:
                return None

    def exists(self, rel: str) -> bool:
        """Whether anything (a link included) is at rel; Refused when reaching it needs a link."""
        return self.lstat(rel) is not None

    def is_dir(self, rel: str) -> bool:
        """Whether rel is a real directory (not a link to one)."""
        st = self.lstat(rel)
        return st is not None and stat.S_ISDIR(st.st_mode)

    def is_file(self, rel: str) -> bool:
        """Whether rel is a regular file (not a link to one)."""
        st = self.lstat(rel)
        return st is not None and stat.S_ISREG(st.st_mode)

    def _open_regular(self, rel: str) -> tuple[int, os.stat_result]:
        """A read fd on a regular file and its status; Refused for anything else."""
        fd = self.open_fd(rel, os.O_RDONLY | os.O_NONBLOCK)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise Refused(rel, f"is {describe(st.st_mode)}, not a regular file")
        return fd, st

    def read_head(self, rel: str, limit: int) -> tuple[bytes, int]:
        """The first `limit` bytes of a regular file, and its size."""
        fd, st = self._open_regular(rel)
        with os.fdopen(fd, "rb") as handle:
            return handle.read(limit), st.st_size

    def read_bytes(self, rel: str, cap: int = READ_CAP) -> bytes:
        """A regular file's bytes; Refused when it is larger than cap."""
        data, size = self.read_head(rel, cap + 1)
        if max(size, len(data)) > cap:
            raise Refused(rel, f"is {max(size, len(data))} bytes, over the cap of {cap}")
        return data

    def read_text(self, rel: str, cap: int = READ_CAP) -> str:
        """A regular file as UTF-8 text (undecodable bytes replaced)."""
        return self.read_bytes(rel, cap).decode("utf-8", errors="replace")

    def write_atomic(
        self,
        rel: str,
        data: bytes | str,
        mode: int = 0o644,
        *,
        replace: bool = False,
        durable: bool = False,
    ) -> None:
        """Write rel through an O_EXCL temporary renamed over it, creating missing parents.

        A link, fifo or directory at rel is Refused, or removed first with `replace`
        (the rename would replace a link or fifo rather than follow it in any case).
        """
        blob = data.encode("utf-8") if isinstance(data, str) else data
        parent, name = self._parent(rel, create=True)
        with parent:
            try:
                st = os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and not stat.S_ISREG(st.st_mode):
                if not replace:
                    raise Refused(rel, f"is {describe(st.st_mode)}, not a regular file")
                from devloop.safetree import remove_tree

                remove_tree(parent, name)
            tmp = f".{name[:64]}.{secrets.token_hex(8)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN
            fd = os.open(tmp, flags, mode, dir_fd=parent.fd)
            try:
                with os.fdopen(fd, "wb") as handle:
                    os.fchmod(fd, mode)  # not narrowed by the umask
                    handle.write(blob)
                    handle.flush()
                    if durable:
                        os.fsync(fd)
                os.rename(tmp, name, src_dir_fd=parent.fd, dst_dir_fd=parent.fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=parent.fd)
                raise
            if durable:
                os.fsync(parent.fd)

    def create_empty(self, rel: str, mode: int = 0o644) -> None:
        """Create rel as an empty file unless something is there already (never through a link)."""
        with contextlib.suppress(FileExistsError):
            os.close(self.open_fd(rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NONBLOCK, mode))

    def mkdirs(self, rel: str, mode: int = 0o755) -> None:
        """Create rel and its missing parents with exactly `mode`; Refused through a link."""
        parts = parts_of(rel)
        fd = self.fd
        try:
            for i, part in enumerate(parts):
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                    created = True
                except FileExistsError:
                    created = False
                try:
                    nxt = os.open(part, _DIR, dir_fd=fd)
                except OSError as exc:
                    raise self._refusal("/".join(parts[: i + 1]), parts[: i + 1], exc) from None
                if fd != self.fd:
                    os.close(fd)
                fd = nxt
                if created:
                    os.fchmod(fd, mode)
        finally:
            if fd != self.fd:
                os.close(fd)

    def remove(self, rel: str) -> bool:
        """Remove a file, link or empty directory at rel; False when nothing was there."""
        parent, name = self._parent(rel)
        with parent:
            try:
                st = os.stat(name, dir_fd=parent.fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    os.rmdir(name, dir_fd=parent.fd)
                else:
                    os.unlink(name, dir_fd=parent.fd)
            except FileNotFoundError:
                return False
            return True

    def chmod(self, rel: str, mode: int) -> None:
        """Set the mode of a file or directory (never of a link's target)."""
        fd = self.open_fd(rel, os.O_PATH)
        try:
            kind = os.fstat(fd).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISDIR(kind)):
                raise Refused(rel, f"is {describe(kind)}: only files and directories")
            # An O_PATH fd cannot be fchmod'ed; its /proc link names exactly that inode.
            os.chmod(f"/proc/self/fd/{fd}", mode)
        finally:
            os.close(fd)

    def lchown(self, rel: str, uid: int, gid: int) -> None:
        """Give rel itself (a link, not its target) to uid:gid."""
        if not parts_of(rel):
            os.fchown(self.fd, uid, gid)
            return
        parent, name = self._parent(rel)
        with parent:
            os.chown(name, uid, gid, dir_fd=parent.fd, follow_symlinks=False)

    def readlink(self, rel: str) -> str:
        """The target text of the link at rel (never resolved)."""
        parent, name = self._parent(rel)
        with parent:
            return os.readlink(name, dir_fd=parent.fd)

    def symlink(self, target: str, rel: str) -> None:
        """Create a link at rel pointing at target (host code never follows it)."""
        parent, name = self._parent(rel, create=True)
        with parent:
            os.symlink(target, name, dir_fd=parent.fd)
