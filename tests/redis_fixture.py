"""Pytest plugin: one private redis-server per test session, flushed before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from devloop.redis_server import RedisServer
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
