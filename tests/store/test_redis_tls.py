"""rediss://: the store and a whole fleet over a Redis that speaks only TLS."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.server.redis_server import connect, redact
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.fleet import fleet
from tests.store.tls_redis import TlsRedis, tls_binary, tls_redis


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    """A TLS-only redis-server; FAILS (never skips) when no TLS-capable binary can be had."""
    binary, problem = tls_binary()
    if binary is None:
        pytest.fail(f"a redis-server with TLS is required for the rediss:// tests: {problem}")
    with tls_redis(binary, tmp_path_factory.mktemp("tls-redis")) as server:
        yield server


def test_the_store_works_over_rediss_and_plaintext_is_refused(tls_server: TlsRedis) -> None:
    store = RedisStore.from_url(tls_server.url)
    try:
        done = store.commit_files("p1", "u1", role="coder", attempt=1, base_version=0,
                                  changes={"code/a.py": b"x = 1\n"})
        assert done.applied and store.unit_files("p1", "u1").files == {"code/a.py": b"x = 1\n"}
    finally:
        store.close()
    plain = f"redis://:{tls_server.password}@127.0.0.1:{tls_server.port}/0"
    with pytest.raises(redis.ConnectionError):
        connect(plain, socket_timeout=2, retry=Retry(NoBackoff(), 0)).ping()
    assert redact(tls_server.url).startswith(f"rediss://:***@127.0.0.1:{tls_server.port}/0?")


def test_a_unit_passes_through_the_fleet_over_rediss(tls_server: TlsRedis, tmp_path: Path
                                                    ) -> None:
    plans = [UnitPlan("over-tls")]
    store = RedisStore.from_url(tls_server.url)
    connect(tls_server.url).flushall()
    try:
        with fleet(store, tls_server.url, build(tmp_path / "p", plans), script(plans),
                   workers=1) as f:
            state = f.wait()
        assert state.all_passed, state
        logs = "".join(p.read_text() for p in f.logs.glob("*.log"))
        assert "rediss://:**@127.0.0.1" in logs  # Celery's banner, the password masked
        assert tls_server.password not in logs
    finally:
        store.close()
