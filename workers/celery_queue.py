"""The task-queue port (devloop/fleet/queue.py) on Celery: the one place a broker error
becomes the library's QueueUnreachable."""

from __future__ import annotations

from collections.abc import Iterable

from celery import Celery
from kombu.exceptions import OperationalError

from devloop.core.config import Settings
from devloop.fleet.messages import Dispatch
from devloop.fleet.queue import QueueUnreachable
from devloop.server.redis_server import celery_form
from devloop.store.base import StoreUnavailable
from workers.app import make_app
from workers.chains import send_on

# A broker gone: kombu wraps what it sees while connecting (OperationalError), but a Redis
# that goes away mid-reply (a run's embedded one, stopping as its run ends) surfaces as the
# client's own connection error, from the middle of a ping's collection.
BROKER_LOST = (OSError, OperationalError, StoreUnavailable)


class CeleryQueue:
    """Steps sent as Celery chains; the app made when first needed, again for another broker.

    The sender names the tasks (workers/chains.py) and never imports them: loading the
    steps would load the model client too, a second or more of every command that sends.
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings
        self.url: str | None = None  # None: DEVLOOP_REDIS_URL
        self._app: Celery | None = None

    @property
    def app(self) -> Celery:
        """The app on the broker last connected to (else DEVLOOP_REDIS_URL)."""
        if self._app is None:
            self._app = make_app(self.settings, self.url)
        return self._app

    def connect(self, url: str) -> None:
        """Use the Redis at url from now on; the old app's pools are closed. Nothing is
        made until a send: a console prints its link without waiting for it."""
        if self.url is not None and celery_form(self.url) == celery_form(url):
            return
        if self._app is not None:
            self._app.close()
            self._app = None
        self.url = url

    def send(self, dispatches: Iterable[Dispatch]) -> None:
        """Put each chain on its queues."""
        try:
            send_on(self.app, dispatches)
        except BROKER_LOST as lost:
            raise QueueUnreachable(f"the broker did not take the steps: {lost}") from lost

    def revoke(self, task_ids: Iterable[str]) -> None:
        """Tell every worker to drop these tasks when they come (a cancel); a task already
        running is not killed: its session stops by itself before its next turn."""
        ids = list(task_ids)
        if not ids:
            return
        try:
            self.app.control.revoke(ids)
        except BROKER_LOST as lost:
            raise QueueUnreachable(f"the broker did not take the revoke: {lost}") from lost

    def consumers(self, timeout_s: float) -> dict[str, list[str]]:
        """Each worker that answers within timeout_s -> the queues it consumes."""
        try:
            replies = self.app.control.inspect(timeout=timeout_s).active_queues() or {}
        except BROKER_LOST as lost:
            raise QueueUnreachable(f"no answer from the broker: {lost}") from lost
        return {worker: [str(q.get("name")) for q in queues or []]
                for worker, queues in replies.items()}

