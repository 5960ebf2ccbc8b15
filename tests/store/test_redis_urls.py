"""Redis URLs: a password never survives redact, whatever form carries it; a client's
retries end within their budget."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from redis.backoff import ExponentialBackoff

from devloop.server.redis_server import RedisServer
from devloop.server.redis_urls import BoundedRetry, celery_form, connect, redact, with_password


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:s3cret@host:6379/0", "redis://:***@host:6379/0"),
    ("redis://user:s3cret@host:6379/0", "redis://user:***@host:6379/0"),
    ("redis://s3cret@host:6379/0", "redis://***@host:6379/0"),
    ("unix://:s3cret@/p/.devloop/redis.sock", "unix://:***@/p/.devloop/redis.sock"),
    ("redis+socket://:s3cret@/p/redis.sock", "redis+socket://:***@/p/redis.sock"),
    ("unix:///p/redis.sock?db=0&password=s3cret", "unix:///p/redis.sock?db=0&password=***"),
    ("rediss://:s3cret@h:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/ca.crt",
     "rediss://:***@h:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/ca.crt"),
    ("redis://host:6379/0", "redis://host:6379/0"),
])
def test_redact_hides_the_password_in_every_form(url: str, shown: str) -> None:
    assert redact(url) == shown and "s3cret" not in redact(url)


def test_with_password_quotes_it_and_celery_form_keeps_it() -> None:
    url = with_password("unix:///p/redis.sock", "a/b@c")
    assert url == "unix://:a%2Fb%40c@/p/redis.sock"
    assert celery_form(url) == "redis+socket://:a%2Fb%40c@/p/redis.sock"
    assert celery_form("redis://:x@h:1/0") == "redis://:x@h:1/0"


def test_a_command_whose_redis_dies_under_it_gives_up_within_its_budget(tmp_path: Path) -> None:
    # A command in flight when its server is killed: redis-py retries the command and,
    # inside each try, the reconnect to the socket file left behind (it refuses), each
    # with the whole policy. Unbounded, 12 retries of 12: 30 s with this policy, minutes
    # with connect's own (seen: `devloop status` as its run's Redis stopped mid-look).
    with RedisServer(tmp_path / "r") as server:
        policy = BoundedRetry(ExponentialBackoff(cap=0.2, base=0.05), 12, budget_s=1.0)
        client = server.client(retry=policy)
        client.set("k", "v")
        proc = server._proc
        assert proc is not None
        killer = threading.Timer(0.3, proc.kill)
        killer.start()
        started = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            client.blpop(["q"], 5)  # in flight when the server dies
        assert time.monotonic() - started < 5
        killer.join()
        # The next command has a whole budget of its own.
        started = time.monotonic()
        with pytest.raises(redis.ConnectionError):
            client.get("k")
        assert 0.9 < time.monotonic() - started < 5
    assert isinstance(connect(server.url).get_retry(), BoundedRetry)
