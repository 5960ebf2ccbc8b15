"""RedisServer: a private redis-server on a unix socket or loopback port, restartable."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.redis_server import MAX_SOCKET_PATH, RedisServer, RedisServerError, connect
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
    assert redis_server.url.startswith("unix:///")
    assert redis_server.celery_url.startswith("redis+socket:///")
    for url in (redis_server.url, redis_server.celery_url):
        assert connect(url).ping()


def test_tcp_server_listens_on_loopback(tmp_path: Path) -> None:
    with RedisServer(tmp_path, unix_socket=False) as server:
        assert server.url.startswith("redis://127.0.0.1:")
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
