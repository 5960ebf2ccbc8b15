"""The cache dir (toolchains, the verdict plugin, the sandbox's /etc, views): trusted only
when no one but this user and root controls it, checked the way OpenSSH's StrictModes
checks a key file.

Every sandbox runs the python and node installed there and reports its verdict through
the plugin copied there, so whoever can write into the cache, or replace any directory on
its path, decides what every run does and what it reports. Before use, each component of
the dir's real path, from `/` down, must belong to this user or root and be writable by
no one else; a world-writable directory is passed only when it is sticky and root's
(`/tmp`, `/var/tmp`), because there only the owner of an entry may rename or remove it, and
the entry below it must then be this user's or root's. The cache dir itself must be this
user's. Anything else is refused (`CacheUntrusted`, exit 2) naming the dir and the fix.

The default is per user, so it never sits in a shared sticky dir: root's is
`/var/cache/devloop` (root's all the way down, and world-readable, because the sandbox runs
as an unprivileged uid that must read the toolchains), anyone else's is
`$XDG_CACHE_HOME/devloop` (else `~/.cache/devloop`: a non-root worker's sandboxes run as
itself).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from devloop.core.config import Settings
from devloop.core.errors import Problem, SandboxUnavailable
from devloop.safe.private import NotPrivate
from devloop.safe.safedir import Dir

ROOT_DEFAULT = Path("/var/cache/devloop")
FIELD = "DEVLOOP_CACHE_DIR"
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
MAX_LINKS = 40  # as the kernel's own limit on links followed in one path


class CacheUntrusted(NotPrivate, SandboxUnavailable):
    """The cache dir, or a directory on its path, is controlled by someone else.

    A NotPrivate (the command line exits 2 with the message) and a SandboxUnavailable (a
    worker that meets it stops the run: no session of this host can run safely).
    """

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def default_cache_dir(euid: int | None = None, env: dict[str, str] | None = None) -> Path:
    """This user's cache dir when DEVLOOP_CACHE_DIR is unset (see the module docstring)."""
    euid = os.geteuid() if euid is None else euid
    env = dict(os.environ) if env is None else env
    if euid == 0:
        return ROOT_DEFAULT
    xdg = env.get("XDG_CACHE_HOME", "")
    if xdg and os.path.isabs(xdg):  # the XDG spec: a relative value is to be ignored
        return Path(xdg) / "devloop"
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".cache" / "devloop"


def cache_root(settings: Settings) -> Path:
    """The configured (or default) cache dir, created and checked; its real path."""
    return trusted_cache(settings.cache_dir or default_cache_dir())


def cache_problem(settings: Settings) -> Problem | None:
    """Why the cache dir cannot be used (None: it can); for checks before a run starts."""
    try:
        cache_root(settings)
    except CacheUntrusted as exc:
        return exc.problem
    return None


def trusted_cache(path: Path) -> Path:
    """`path` as a cache dir: missing parts created, every component checked (a link on the
    way too: it must be this user's or root's), made 0755 (the sandbox uid reads it); its
    real path, which callers use from then on (links are resolved once, here)."""
    wanted = Path(os.path.abspath(path))
    euid = os.geteuid()
    current = Path("/")
    _check(wanted, current, os.lstat(current), euid, last=not wanted.relative_to("/").parts)
    pending = list(wanted.relative_to("/").parts)
    links = 0
    while pending:
        name = pending.pop(0)
        if name == "..":
            current = current.parent
            continue
        entry = current / name
        try:
            st = os.lstat(entry)
        except FileNotFoundError:
            with contextlib.suppress(FileExistsError):
                os.mkdir(entry, 0o755)
            st = os.lstat(entry)  # whoever made it, it is judged like any other
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if st.st_uid not in (euid, 0) or links > MAX_LINKS:
                why = (f"is a link of uid {st.st_uid}, not yours or root's" if links <= MAX_LINKS
                       else "passes through too many links")
                raise _untrusted(wanted, entry, why, is_cache=False)
            target = Path(os.readlink(entry))
            current = Path("/") if target.is_absolute() else current
            pending = [p for p in target.parts if p not in ("/", ".")] + pending
            continue
        current = entry
        _check(wanted, current, st, euid, last=not pending)
    fd = os.open(current, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if stat.S_IMODE(os.fstat(fd).st_mode) != 0o755:
            os.fchmod(fd, 0o755)
    finally:
        os.close(fd)
    return current


def _check(wanted: Path, directory: Path, st: os.stat_result, euid: int, *, last: bool) -> None:
    """CacheUntrusted unless one directory on the path (the cache dir itself when `last`)
    passes: a directory of this user's or root's (the cache dir: this user's) that no one
    else may write, or a sticky dir of root's on the way (`/tmp`)."""
    why = None
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif st.st_uid not in ((euid,) if last else (euid, 0)):
        why = f"belongs to uid {st.st_uid}, not to {'you' if last else 'you or root'} (uid {euid})"
    elif st.st_mode & WRITABLE_BY_OTHERS and (last or not (st.st_mode & stat.S_ISVTX
                                                           and st.st_uid == 0)):
        # A sticky dir of root's passes: there only an entry's owner may rename or remove
        # it, and the next component must be this user's or root's.
        why = (f"is writable by other users (mode {mode:o}), so "
               + ("anything in it may be theirs" if last else
                  "they could replace what lies under it"))
    if why is not None:
        raise _untrusted(wanted, directory, why, is_cache=last)


def _untrusted(wanted: Path, directory: Path, why: str, *, is_cache: bool) -> CacheUntrusted:
    """The refusal: which dir, why, and what to do."""
    where = "" if directory == wanted else f"{directory} (on its path) "
    if is_cache and "writable" in why:
        fix = (f"chmod go-w {directory} after checking what others put in it (or remove it; "
               f"DevLoop recreates it), or set {FIELD} to a dir of your own")
    elif is_cache:
        fix = (f"remove it (DevLoop recreates it as yours), or set {FIELD} to a dir of your "
               f"own (default: {default_cache_dir()})")
    else:
        fix = (f"set {FIELD} to a dir whose every parent only you or root can write "
               f"(default: {default_cache_dir()})")
    return CacheUntrusted(Problem(
        str(wanted), FIELD, f"{where}{why}; another user could control the toolchains and "
        "the verdict plugin every sandbox runs", fix))


def ensure_public_dir(path: Path, mode: int = 0o755) -> Path:
    """`path`, a directory of this user's inside the cache that other uids may enter (the
    sandbox uid must reach what it binds): made when missing, never through a link, and
    refused (CacheUntrusted) when someone else's."""
    with Dir.open(path.parent) as parent:
        with contextlib.suppress(FileExistsError):
            os.mkdir(path.name, mode, dir_fd=parent.fd)
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=parent.fd)
        except OSError as exc:
            raise _untrusted(path, path, f"is not a directory of its own ({exc.strerror})",
                             is_cache=True) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise _untrusted(path, path, f"belongs to uid {st.st_uid}, not to you (uid "
                             f"{os.geteuid()})", is_cache=True)
        if stat.S_IMODE(st.st_mode) != mode:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return path


def open_lock(directory: Path, name: str) -> int:
    """An fd to flock: directory/name, a 0600 regular file of this user's, made when
    missing; never a planted link or fifo (CacheUntrusted naming it)."""
    path = directory / name
    with Dir.open(directory) as parent:
        try:
            fd = parent.open_fd(name, os.O_RDWR | os.O_CREAT | os.O_NONBLOCK, 0o600)
        except OSError as exc:
            raise _untrusted(path, path, f"cannot be opened as a lock file ({exc})",
                             is_cache=True) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise _untrusted(path, path, "is not a regular file of yours", is_cache=True)
    return fd


@contextlib.contextmanager
def locked(directory: Path, name: str) -> Iterator[int]:
    """Hold an exclusive flock on directory/name (see open_lock) for the block."""
    fd = open_lock(directory, name)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)
