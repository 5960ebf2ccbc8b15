"""Redis URLs: the client for any form DevLoop accepts, Celery's spelling, and the only
form a message may show (without the password).

    redis://:PASSWORD@host:6379/0         TCP (the password is Redis's requirepass)
    rediss://:PASSWORD@host:6379/0?ssl_cert_reqs=required&ssl_ca_certs=/path/ca.crt   TLS
    unix://:PASSWORD@/path/redis.sock     a unix socket (redis-py's spelling)
    redis+socket://:PASSWORD@/path/redis.sock   the same (Celery's spelling)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, urlsplit

import redis
from redis.backoff import AbstractBackoff, ExponentialBackoff
from redis.retry import Retry

T = TypeVar("T")
# How long one command keeps retrying once it has failed: the twelve retries below wait
# about 17 s between them, long enough to outlast a Redis restart.
RETRY_BUDGET_S = 20.0


# (Its `type: ignore`s: types-redis describes redis 4.6's Retry, not the one installed.)
class BoundedRetry(Retry):
    """A Retry whose calls nested in one another share one budget, counted from the first
    failure: redis-py retries a command and, inside each try, its reconnect, each with its
    own copy of the policy, so unbounded the waits multiply (seen: `devloop status` waited
    over two minutes on a socket whose server had stopped: it refuses, it does not vanish)."""

    _failing_since = threading.local()  # the outermost call's first failure, while it runs

    def __init__(self, backoff: AbstractBackoff, retries: int,
                 budget_s: float = RETRY_BUDGET_S) -> None:
        # As the policy's own checker: redis-py runs the failure handler (which drops the
        # broken connection) before it raises what the checker refuses.
        super().__init__(backoff, retries, is_retryable=self._in_budget)  # type: ignore[call-arg]
        self.budget_s = budget_s

    def _in_budget(self, error: Exception) -> bool:
        """Whether the failing call may try again: its budget is not spent."""
        since, now = self._failing_since, time.monotonic()
        if getattr(since, "at", None) is None:
            since.at = now
        return bool(now - since.at < self.budget_s)

    def call_with_retry(
        self,
        do: Callable[[], T],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        """Retry as Retry does; the outermost call starts and ends the shared budget."""
        since = self._failing_since
        outermost = not getattr(since, "running", False)
        if outermost:
            since.running, since.at = True, None
        try:
            return super().call_with_retry(  # type: ignore[call-arg]
                do, fail, is_retryable, with_failure_count)
        finally:
            if outermost:
                since.running, since.at = False, None


def connect(url: str, **kwargs: Any) -> redis.Redis:
    """A redis-py client for a redis://, rediss://, unix:// or redis+socket:// URL.

    Commands retry on connection errors for about seventeen seconds (BoundedRetry), so a
    Redis restart (AOF on) is a pause for the fleet, not a failed session.
    """
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("redis+socket", "socket"):
        # Celery/kombu's unix-socket form; redis-py spells the same thing unix://.
        url = "unix://" + rest
    kwargs.setdefault("retry", BoundedRetry(ExponentialBackoff(cap=2.0, base=0.05), retries=12))
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
