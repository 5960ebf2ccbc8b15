"""Redis URLs: the client for any form DevLoop accepts, Celery's spelling, and the only
form a message may show (without the password).

    redis://:PASSWORD@host:6379/0         TCP (the password is Redis's requirepass)
    rediss://:PASSWORD@host:6379/0?ssl_cert_reqs=required&ssl_ca_certs=/path/ca.crt   TLS
    unix://:PASSWORD@/path/redis.sock     a unix socket (redis-py's spelling)
    redis+socket://:PASSWORD@/path/redis.sock   the same (Celery's spelling)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry


def connect(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client for a redis://, rediss://, unix:// or redis+socket:// URL.

    Commands retry on connection errors for about ten seconds, so a Redis restart (AOF
    on) is a pause for the fleet, not a failed session.
    """
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("redis+socket", "socket"):
        # Celery/kombu's unix-socket form; redis-py spells the same thing unix://.
        url = "unix://" + rest
    kwargs.setdefault("retry", Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=12))
    kwargs.setdefault("retry_on_error", [redis.ConnectionError, redis.TimeoutError, OSError])
    return redis.Redis.from_url(url, **kwargs)


def redact(url: str) -> str:
    """The URL with its password replaced by ***: the only form a message or log may show."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        # Without a colon some clients read the whole userinfo as the password.
        netloc = f"{user}:***@{host}" if colon else f"***@{host}"
    query = "&".join(
        "password=***" if pair.partition("=")[0] == "password" else pair
        for pair in parts.query.split("&")
    ) if parts.query else ""
    # Spelled out: urlunsplit drops the empty host of unix:///path.
    return (f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
            + (f"#{parts.fragment}" if parts.fragment else ""))


def with_password(url: str, password: str) -> str:
    """`scheme://:password@rest` for a URL that has no credentials yet."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}:{quote(password, safe='')}@{rest}"


def celery_form(url: str) -> str:
    """Celery's spelling of a Redis URL: a unix socket as redis+socket:// (broker and backend)."""
    return "redis+socket://" + url.removeprefix("unix://") if url.startswith("unix://") else url
