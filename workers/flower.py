"""Flower as DevLoop runs it: Celery's `flower` command, with `/metrics` and `/healthcheck`
behind the same basic auth as every other page.

Flower 2.x serves those two to anyone whatever auth is configured (its docs list them as
unauthenticated), and the metrics name every worker and count every task by name and state.
Flower builds its application from the route list in `flower.urls`, so the two routes are
swapped there for subclasses that require the user, before the command starts; a Flower whose
routes no longer match is refused rather than run open.

Run as `python -m workers.flower -A workers.worker_app flower --port=P --address=A` (the arguments
are Celery's; credentials come by environment, FLOWER_BASIC_AUTH).
"""

from __future__ import annotations

from typing import Any

from flower import urls
from flower.views import monitor
from tornado import web


class AuthenticatedMetrics(monitor.Metrics):
    """Prometheus metrics, for the holder of Flower's credentials only."""

    @web.authenticated
    async def get(self) -> None:
        await super().get()


class AuthenticatedHealthcheck(monitor.Healthcheck):
    """"OK", for the holder of Flower's credentials only."""

    @web.authenticated
    async def get(self) -> None:
        await super().get()


GUARDED: dict[str, type[web.RequestHandler]] = {
    "/metrics": AuthenticatedMetrics,
    "/healthcheck": AuthenticatedHealthcheck,
}


class FlowerChanged(RuntimeError):
    """The installed Flower's routes are not the ones this module guards."""


def guard_routes(handlers: list[Any]) -> None:
    """Swap Flower's open routes for the authenticated ones, in place (FlowerChanged when
    one is missing: better no Flower than an open one)."""
    swapped = set()
    for index, handler in enumerate(handlers):
        if isinstance(handler, tuple) and handler[0] in GUARDED:
            handlers[index] = (handler[0], GUARDED[handler[0]], *handler[2:])
            swapped.add(handler[0])
    missing = set(GUARDED) - swapped
    if missing:
        raise FlowerChanged(f"flower.urls has no route {sorted(missing)} to put behind its "
                            "auth: install flower 2.2 (pyproject.toml), or teach "
                            "workers/flower.py its routes")


def main() -> None:
    guard_routes(urls.handlers)
    from celery.__main__ import main as celery_main

    celery_main()


if __name__ == "__main__":
    main()
