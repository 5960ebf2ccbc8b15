"""Keeping a command's embedded Redis running: its own server started again when it dies,
and a server another command started adopted when that command stops it.

A run (or a standalone console) that reused another command's server adopts it once that
command has stopped it and let go of the files' lock (a console closed under a run, a run
ended under a console): it starts it again with the same socket, password and AOF, so its
clients reconnect, and owns it from then on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from devloop.server.embedded import (
    RedisEndpoint,
    answers,
    own_server_files,
    start_recorded,
    stop_recorded,
)
from devloop.server.redis_server import (
    MAX_SOCKET_PATH,
    SOCKET_NAME,
    RedisServer,
    RedisServerError,
)

log = logging.getLogger(__name__)


@dataclass
class Adopted:
    """A server this command started again, on the socket, password and AOF of a server
    another command started and then stopped; with the lock on the files."""

    state: Path
    server: RedisServer
    lock: int

    def close(self) -> None:
        """Stop it as its first owner would have: records, then the server, then the lock."""
        try:
            stop_recorded(self.state, self.server)
        finally:
            os.close(self.lock)


def adopt(reused: RedisEndpoint) -> Adopted | None:
    """Start the server `reused` named again, now that the command that owned it is gone;
    None while a command still owns the files, while a server answers there, or when the
    socket was not .devloop/redis.sock (a deep path's socket dir went with its owner)."""
    state = reused.state
    if state is None:
        return None
    parts = urlsplit(reused.url)
    socket_path = state / SOCKET_NAME
    if parts.scheme != "unix" or Path(parts.path) != socket_path or (
            len(str(socket_path)) >= MAX_SOCKET_PATH):
        return None
    lock = own_server_files(state)
    if lock is None:
        return None
    try:
        if answers(reused.url):  # its owner died and left it running: reused as it is
            os.close(lock)
            return None
        server = start_recorded(state, unquote(parts.password or ""))
    except BaseException:
        os.close(lock)
        raise
    return Adopted(state, server, lock)


class RedisKeeper:
    """Keeps the embedded server a command started running: a dead one is started again on
    its socket, with its password and its AOF, after a growing backoff. A server another
    command started (`reused`, an embedded endpoint) is adopted when that command stops it,
    and kept from then on; close() stops an adopted one.

    `devloop run` calls check() on every look at the project; workers and the run's own
    client reconnect by themselves (their retries outlast a restart).
    """

    def __init__(
        self,
        server: RedisServer | None,
        *,
        reused: RedisEndpoint | None = None,
        backoff_s: float = 0.5,
        backoff_cap_s: float = 10.0,
        max_failures: int = 5,
    ) -> None:
        self.server = server
        self.reused = reused
        self.adopted: Adopted | None = None
        self.backoff_s, self.backoff_cap_s = backoff_s, backoff_cap_s
        self.max_failures = max_failures
        self.restarts = 0
        self.failures = 0
        self._next_try: float | None = None

    @classmethod
    def of(cls, endpoint: RedisEndpoint) -> RedisKeeper:
        """The keeper of a command's endpoint: the server it started, else the embedded
        server it reused, to adopt (a configured Redis is nobody's to keep)."""
        reused = endpoint if endpoint.embedded and endpoint.server is None else None
        return cls(endpoint.server, reused=reused)

    def check(self) -> str | None:
        """Restart the server if it died; what happened, for the live view (None: all well).

        RedisServerError once it failed to start `max_failures` times in a row.
        """
        server = self.server
        if server is None:
            return self._adopt()
        if server.running:
            return None
        now = time.monotonic()
        if self._next_try is None:
            self._next_try = now  # it just died: try at once
        if now < self._next_try:
            return "Redis is down; restarting it"
        try:
            server.start()
        except RedisServerError:
            self.failures += 1
            if self.failures >= self.max_failures:
                raise
            self._next_try = now + min(self.backoff_cap_s, self.backoff_s * 2**self.failures)
            return f"Redis is down; restart {self.failures} failed, trying again"
        self.restarts += 1
        self.failures, self._next_try = 0, None
        return f"Redis died and was restarted from its AOF (restart {self.restarts})"

    def _adopt(self) -> str | None:
        """Start the reused server again once the command that owned it has gone."""
        if self.reused is None:
            return None
        try:
            self.adopted = adopt(self.reused)
        except RedisServerError:  # its last owner's server is still going: next look
            return "Redis went away with the command that started it; starting it again"
        if self.adopted is None:
            return None
        self.server, self.reused = self.adopted.server, None
        return "Redis was stopped by the command that started it, and started again here"

    def close(self) -> None:
        """Stop the server this keeper adopted, if it did (an owned one is its command's)."""
        if self.adopted is not None:
            self.adopted.close()
            self.adopted = None


@contextmanager
def kept(endpoint: RedisEndpoint, every_s: float = 1.0) -> Iterator[RedisKeeper]:
    """Keep a long-lived command's Redis on a thread while the body runs (`devloop console`:
    its own server restarted when it dies, a run's adopted when the run ends); an adopted
    one is stopped at the end. `devloop run` checks its keeper in its own loop instead."""
    keeper = RedisKeeper.of(endpoint)
    stop = threading.Event()

    def keep() -> None:
        # A server this thread starts asks for SIGTERM when the thread ends (PDEATHSIG):
        # the thread lives as long as the command.
        while not stop.wait(every_s):
            try:
                if note := keeper.check():
                    log.warning("%s", note)
            except RedisServerError as exc:
                # It failed to start max_failures times in a row: trying every second after
                # that would only spawn servers that fail and fill the log.
                log.warning("Redis could not be started again; no more tries: %s", exc)
                return

    thread = threading.Thread(target=keep, name="redis-keeper", daemon=True)
    thread.start()
    try:
        yield keeper
    finally:
        stop.set()
        thread.join()
        keeper.close()
