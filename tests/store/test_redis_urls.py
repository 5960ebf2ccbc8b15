"""Redis URLs: a password never survives redact, whatever form carries it."""

from __future__ import annotations

import pytest

from devloop.server.redis_urls import celery_form, redact, with_password


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
