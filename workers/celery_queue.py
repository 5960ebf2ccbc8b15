"""The task-queue port (devloop/fleet/queue.py) on Celery: the one place a broker error
becomes the library's QueueUnreachable."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from celery import Celery
from kombu import Connection
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
# How often a sender's retried operation reconnects before it gives up, and the pause between.
SENDER_TRIES = 2
SENDER_PAUSE_S = 0.5


class GivingUpConnection(Connection):
    """A broker connection whose retried operations give up after SENDER_TRIES short tries.

    kombu's mailbox (a ping, a revoke) publishes with retry=True and no policy, which waits
    forever for a Redis that went away after the connection was made (seen: `devloop status`
    hung as its run's Redis stopped mid-ping).
    """

    def ensure(self, obj: Any, fun: Any, errback: Any = None, max_retries: Any = None,
               *policy: Any, **named: Any) -> Any:
        """kombu's ensure, with a bound where the caller set none."""
        tries = SENDER_TRIES if max_retries is None else max_retries
        if not policy:
            named = {"interval_start": SENDER_PAUSE_S, "interval_step": SENDER_PAUSE_S,
                     "interval_max": SENDER_PAUSE_S, **named}
        return super().ensure(obj, fun, errback, tries, *policy, **named)


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
            # The connections this sender makes itself (not its pool's): see _control_line.
            self._app.amqp.Connection = GivingUpConnection
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
            with self._control_line() as line:
                self.app.control.revoke(ids, connection=line)
        except BROKER_LOST as lost:
            raise QueueUnreachable(f"the broker did not take the revoke: {lost}") from lost

    def consumers(self, timeout_s: float) -> dict[str, list[str]]:
        """Each worker that answers within timeout_s -> the queues it consumes."""
        try:
            with self._control_line() as line:
                replies = self.app.control.inspect(timeout=timeout_s,
                                                   connection=line).active_queues() or {}
        except BROKER_LOST as lost:
            raise QueueUnreachable(f"no answer from the broker: {lost}") from lost
        return {worker: [str(q.get("name")) for q in queues or []]
                for worker, queues in replies.items()}

    def _control_line(self) -> Connection:
        """A connection of its own for a broadcast (a ping, a revoke), closed after it: one
        that gives up (GivingUpConnection), where the app's pool would retry forever."""
        return self.app.connection_for_write()
