"""The Redis a command uses: DEVLOOP_REDIS_URL, or an embedded server under the project.

The embedded server lives in `PROJECT/.devloop/` (mode 0700). A later command reuses a
running one only when it is provably the server an earlier command of this user started
for this project: its unix socket belongs to this user, sits in `.devloop/` (or, for a
deep path, in a private dir of DevLoop's under /tmp) that no one else may enter, and it
answers to the password in `.devloop/redis.token`, a 0600 file of this user's. Anything
else `.devloop/redis.url` names (a TCP address, another user's socket, a link, a dir
others may write to) is ignored, never connected to, and a fresh server is started.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.config import Settings
from devloop.errors import Problem
from devloop.private import (
    NotPrivate,
    make_private_dir,
    read_private,
    remove_planted,
    socket_problem,
    write_private,
)
from devloop.redis_server import (
    RedisServer,
    celery_form,
    connect,
    redact,
    socket_belongs_to,
    with_password,
)

STATE_DIR = ".devloop"
MARKER = "redis.url"  # where the socket is (it may be under /tmp), without the password
TOKEN = "redis.token"  # the server's password, 0600


@dataclass(frozen=True)
class RedisEndpoint:
    """Where Redis is: a redis-py URL and the form Celery wants (redis+socket:// for sockets).

    Both carry the password; `address` is the form to show.
    """

    url: str = field(repr=False)
    celery_url: str = field(repr=False)
    embedded: bool

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


def _live(url: str) -> bool:
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
    if not _live(url):
        return None
    return RedisEndpoint(url, celery_form(url), embedded=True)


@contextmanager
def redis_endpoint(project_dir: Path, settings: Settings) -> Iterator[RedisEndpoint]:
    """Yield the configured Redis, or start one under PROJECT_DIR/.devloop (AOF on) and stop it.

    A server left running there by another DevLoop command of this user is reused, not
    restarted, when it is provably that server (see the module docstring).
    """
    if settings.redis_url:
        url = settings.redis_url
        yield RedisEndpoint(url, celery_form(url), embedded=False)
        return
    state = private_state_dir(project_dir)
    reused = running_server(state)
    if reused is not None:
        yield reused
        return
    # A folder someone else wrote may hold links where the server writes its files.
    remove_planted(state)
    server = RedisServer(state, appendonly=True, password=secrets.token_hex(24))
    try:
        write_private(state / TOKEN, server.password.encode())
        # The socket may live in /tmp when the project path is deep, so record where it is.
        write_private(state / MARKER, (server.bare_url + "\n").encode())
        yield RedisEndpoint(server.url, server.celery_url, embedded=True)
    finally:
        for name in (MARKER, TOKEN):
            (state / name).unlink(missing_ok=True)
        server.close()
