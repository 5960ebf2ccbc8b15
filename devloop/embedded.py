"""The Redis a command uses: DEVLOOP_REDIS_URL, or an embedded server under the project."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from devloop.config import Settings
from devloop.redis_server import RedisServer, celery_form, connect


@dataclass(frozen=True)
class RedisEndpoint:
    """Where Redis is: a redis-py URL and the form Celery wants (redis+socket:// for sockets)."""

    url: str
    celery_url: str
    embedded: bool


def _live(url: str) -> bool:
    try:
        return bool(connect(url, socket_timeout=1, retry=Retry(NoBackoff(), 0)).ping())
    except (redis.RedisError, OSError):
        return False


@contextmanager
def redis_endpoint(project_dir: Path, settings: Settings) -> Iterator[RedisEndpoint]:
    """Yield the configured Redis, or start one under PROJECT_DIR/.devloop (AOF on) and stop it.

    A server left running there by another DevLoop command is reused, not restarted.
    """
    if settings.redis_url:
        url = settings.redis_url
        yield RedisEndpoint(url, celery_form(url), embedded=False)
        return
    state_dir = Path(project_dir) / ".devloop"
    state_dir.mkdir(parents=True, exist_ok=True)
    # The socket may live in /tmp when the project path is deep, so record where it is.
    marker = state_dir / "redis.url"
    if marker.exists():
        url = marker.read_text().strip()
        if _live(url):
            yield RedisEndpoint(url, celery_form(url), embedded=True)
            return
    server = RedisServer(state_dir, appendonly=True)
    marker.write_text(server.url + "\n")
    try:
        yield RedisEndpoint(server.url, server.celery_url, embedded=True)
    finally:
        marker.unlink(missing_ok=True)
        server.stop()
