"""Pytest plugin: one private redis-server per test session, flushed before each test."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.server.redis_server import RedisServer, connect
from devloop.store import RedisStore


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server on a unix socket in a temp dir, for the whole session."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session's server, which starts every test empty."""
    if not redis_server.running:
        redis_server.start()  # a test that stopped the server must not break the next one
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def redis_store(redis_client: redis.Redis) -> RedisStore:
    """A RedisStore over the flushed client, with the default size cap."""
    return RedisStore(redis_client)


def assert_password_required(port: int, password: str, pid: int) -> None:
    """The Redis on 127.0.0.1:port refuses a client without the password, takes one with
    it, and the process pid does not show it on its command line."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"PING\r\n")
        assert conn.recv(100).startswith(b"-NOAUTH")
    with pytest.raises(redis.AuthenticationError):
        connect(f"redis://127.0.0.1:{port}/0", retry=Retry(NoBackoff(), 0)).ping()
    assert connect(f"redis://:{password}@127.0.0.1:{port}/0").ping()
    assert password.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
