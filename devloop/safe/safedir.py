"""`Dir`: a directory handle through which nothing outside it, and no link, is reachable.

Host code handles what a hostile session left in its view (any path may be a symlink, a
fifo, a device) only through a `Dir`: it receives a handle, never a path string, so
"outside" is not expressible. Every path is resolved beneath the handle's directory fd
without following a link (devloop.safe.beneath: `openat2` with RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS where the kernel has it, else component by component with
O_NOFOLLOW). Files open non-blocking (a fifo never blocks a thread) and anything but a
regular file is refused after fstat. Writes go to an O_CREAT | O_EXCL temporary in the
target's own directory, renamed over the target (which replaces a planted link or fifo
rather than following it). Trees are walked and removed by devloop.safe.safetree.

    OSError
    +-- Refused        a path a Dir will not touch: `.path` (relative) and `.reason`
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

from devloop.safe.beneath import (
    DIR,
    OPEN,
    Refused,
    describe,
    kernel_resolves,
    open_beneath,
    parts_of,
    refusal,
)
from devloop.safe.removal import remove_entry

__all__ = ["Dir", "Refused", "describe", "kernel_resolves", "parts_of"]

READ_CAP = 16 * 1024 * 1024


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
            fd = os.open(path, DIR)
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
        return open_beneath(self.fd, rel, flags, mode, kernel=self.kernel)

    def opendir(self, rel: str) -> Dir:
        """A handle on the directory `rel` (the caller closes it)."""
        fd = self.open_fd(rel, os.O_RDONLY | os.O_DIRECTORY)
        return Dir(fd, f"{self.name}/{rel}" if rel else self.name, kernel=self.kernel)

    def _parent(self, rel: str, *, create: bool = False) -> tuple[Dir, str]:
        """(handle on rel's directory, rel's last component); Refused for the dir itself."""
        parts = parts_of(rel)
        if not parts:
            raise Refused(rel or ".", "names the directory itself, not an entry in it")
        head = "/".join(parts[:-1])
        try:
            if create and head:
                self.mkdirs(head)
            return self.opendir(head), parts[-1]
        except Refused as exc:  # name the entry asked for, and the link on its way
            link = exc.reason == "is a symlink"
            reason = f"passes through a symlink ({exc.path})" if link else exc.reason
            raise Refused(rel, reason, exc.errno or errno.EPERM) from None

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
                remove_entry(parent.fd, name)
            tmp = f".{name[:64]}.{secrets.token_hex(8)}.tmp"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | OPEN
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
                    nxt = os.open(part, DIR, dir_fd=fd)
                except OSError as exc:
                    raise refusal(self.fd, "/".join(parts[: i + 1]), parts[: i + 1], exc) from None
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
