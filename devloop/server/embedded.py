"""The Redis a command uses: DEVLOOP_REDIS_URL, or an embedded server under the project.

The embedded server lives in `PROJECT/.devloop/` (mode 0700). A later command reuses a
running one only when it is provably the server an earlier command of this user started
for this project: its unix socket belongs to this user, sits in `.devloop/` (or, for a
deep path, in a private dir of DevLoop's under /tmp) that no one else may enter, and it
answers to the password in `.devloop/redis.token`, a 0600 file of this user's. Anything
else `.devloop/redis.url` names (a TCP address, another user's socket, a link, a dir
others may write to) is ignored, never connected to, and a fresh server is started.

One command at a time owns the server files: it holds a lock on `.devloop/redis.lock` from
before its server starts until after it stops. A command that finds no live server while
another owns the files (a run restarting its Redis, a command starting or stopping one)
waits for that server instead of starting a second on the same AOF and taking its files.
Keeping a server running, and adopting another command's, is devloop.server.keeper's.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.core.config import Settings
from devloop.core.errors import Problem
from devloop.safe.private import (
    NotPrivate,
    make_private_dir,
    read_private,
    remove_planted,
    socket_problem,
    write_private,
)
from devloop.server.redis_server import (
    RedisServer,
    RedisServerError,
    celery_form,
    connect,
    redact,
    socket_belongs_to,
    with_password,
)

STATE_DIR = ".devloop"
MARKER = "redis.url"  # where the socket is (it may be under /tmp), without the password
TOKEN = "redis.token"  # the server's password, 0600
LOCK = "redis.lock"  # held by the command that owns the server files; holds its pid
# How long a command waits for the server of the command that owns the files: a run's
# keeper starts a dead one again at once, then after 1, 2, 4 and 8 s (server.keeper).
OWNER_WAIT_S = 30.0
_LOOK_AGAIN_S = 0.2


@dataclass(frozen=True)
class RedisEndpoint:
    """Where Redis is: a redis-py URL and the form Celery wants (redis+socket:// for sockets).

    Both carry the password; `address` is the form to show.
    """

    url: str = field(repr=False)
    celery_url: str = field(repr=False)
    embedded: bool
    # The server this command started (and may restart); None when reused or configured.
    server: RedisServer | None = field(default=None, repr=False, compare=False)
    # PROJECT/.devloop when embedded: where its files and their lock are.
    state: Path | None = field(default=None, repr=False, compare=False)

    @property
    def address(self) -> str:
        """The URL without its password."""
        return redact(self.url)


def private_state_dir(project_dir: Path) -> Path:
    """PROJECT/.devloop: created 0700, or this user's existing dir tightened to 0700.

    Refused (NotPrivate) when it is a link or another user's, or when the project dir lets
    any user swap it (world-writable without the sticky bit).
    """
    project = Path(project_dir).resolve()
    st = os.stat(project)
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise NotPrivate(str(Problem(
            str(project), "mode", f"any user may write here, so {STATE_DIR}/ could be "
            "swapped under DevLoop", "chmod o-w it, or set DEVLOOP_REDIS_URL")))
    state = make_private_dir(project / STATE_DIR)
    if not os.path.lexists(state / ".gitignore"):
        # The AOF holds the whole project state: keep it out of the project's repository.
        write_private(state / ".gitignore", b"*\n")
    return state


def answers(url: str) -> bool:
    """Whether a Redis answers PING at url right now (one try, 1 s)."""
    try:
        client = connect(url, socket_timeout=1, socket_connect_timeout=1,
                         retry=Retry(NoBackoff(), 0))
        with client:
            return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


def running_server(state: Path) -> RedisEndpoint | None:
    """The server an earlier command started for this project, if it provably is that one."""
    marker = read_private(state / MARKER)
    token = read_private(state / TOKEN, limit=256)
    if marker is None or token is None:
        return None
    scheme, _, rest = marker.decode(errors="replace").strip().partition("://")
    socket_path = Path(rest)
    if (
        scheme != "unix"
        or not socket_path.is_absolute()
        or not socket_belongs_to(socket_path, state)
        or socket_problem(socket_path) is not None
    ):
        return None  # not a socket of ours: never connected to, so it learns nothing
    url = with_password(f"unix://{socket_path}", token.decode(errors="replace").strip())
    if not answers(url):
        return None
    return RedisEndpoint(url, celery_form(url), embedded=True, state=state)


def _open_lock(path: Path) -> int:
    """An fd of the lock file, created 0600; a link or fifo in its place is OSError."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 0o600)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path} is not a regular file")
    return fd


def own_server_files(state: Path) -> int | None:
    """The fd holding the lock on `state`'s server files (closing it lets go), or None
    while another command holds it."""
    try:
        fd = _open_lock(state / LOCK)
    except OSError:
        remove_planted(state)  # something planted in its place: ours to replace
        fd = _open_lock(state / LOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _owner(state: Path) -> str:
    """`pid 123`: the command holding the lock, as it wrote itself there."""
    pid = (read_private(state / LOCK, limit=32) or b"").decode(errors="replace").strip()
    return f"pid {pid}" if pid.isdigit() else "pid unknown"


@contextmanager
def redis_endpoint(
    project_dir: Path, settings: Settings, owner_wait_s: float = OWNER_WAIT_S
) -> Iterator[RedisEndpoint]:
    """Yield the configured Redis, or start one under PROJECT_DIR/.devloop (AOF on) and stop it.

    A server left running there by another DevLoop command of this user is reused, not
    restarted, when it is provably that server (see the module docstring). While another
    command owns the server files and its server does not answer, this one waits up to
    owner_wait_s for it (RedisServerError after). A new one is not started on data
    DevLoop never writes (ForeignData, an input error: a planted AOF).
    """
    if settings.redis_url:
        url = settings.redis_url
        yield RedisEndpoint(url, celery_form(url), embedded=False)
        return
    state = private_state_dir(project_dir)
    deadline = time.monotonic() + owner_wait_s
    while True:
        reused = running_server(state)
        if reused is not None:
            yield reused
            return
        lock = own_server_files(state)
        if lock is not None:
            break
        if time.monotonic() > deadline:
            raise RedisServerError(
                f"the embedded Redis of {state} belongs to another DevLoop command "
                f"({_owner(state)}) and has not answered for {owner_wait_s:.0f} s; wait for "
                "that command to end (or stop it), then run this one again"
            )
        time.sleep(_LOOK_AGAIN_S)
    try:
        yield from _own_server(state)
    finally:
        os.close(lock)  # after the server stopped: the next owner starts on a quiet AOF


def _own_server(state: Path) -> Iterator[RedisEndpoint]:
    """Start a server on the state dir's files, yield it, and stop it and its records."""
    server = start_recorded(state, secrets.token_hex(24))
    try:
        yield RedisEndpoint(server.url, server.celery_url, embedded=True, server=server,
                            state=state)
    finally:
        stop_recorded(state, server)


def start_recorded(state: Path, password: str) -> RedisServer:
    """Start a server on the state dir's files (with the lock held) and record where it is
    and its password, for the next command to find."""
    # A folder someone else wrote may hold links where the server writes its files.
    remove_planted(state)
    server = RedisServer(state, appendonly=True, password=password)
    try:
        write_private(state / TOKEN, server.password.encode())
        # The socket may live in /tmp when the project path is deep, so record where it is.
        write_private(state / MARKER, (server.bare_url + "\n").encode())
    except BaseException:
        stop_recorded(state, server)
        raise
    return server


def stop_recorded(state: Path, server: RedisServer) -> None:
    """Remove the records, then stop the server (before the lock is let go)."""
    for name in (MARKER, TOKEN):
        (state / name).unlink(missing_ok=True)
    server.close()
