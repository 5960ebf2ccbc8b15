"""The one Celery app: Redis broker and result backend, JSON only, settings for long tasks."""

from __future__ import annotations

import logging

from celery import Celery
from celery.signals import worker_process_init
from kombu import Exchange, Queue

from devloop.core.config import Settings, load_settings
from devloop.server.deathsig import follow_parent
from devloop.server.redis_server import celery_form

log = logging.getLogger(__name__)
QUEUES = ("coder", "tester", "control")
ROUTES = {
    "devloop.coder": {"queue": "coder"},
    "devloop.tester": {"queue": "tester"},
    # decide is milliseconds of work; its own queue keeps releases from waiting behind tests.
    "devloop.decide": {"queue": "control"},
}


def make_app(settings: Settings | None = None, url: str | None = None) -> Celery:
    """A Celery app configured from DEVLOOP_* settings, on the Redis at url (else
    DEVLOOP_REDIS_URL); the tasks are workers/tasks.py's shared ones."""
    s = settings or load_settings()
    if s.visibility_timeout_s <= s.task_time_limit_s:
        # Redis then redelivers tasks that are still running (seen: three concurrent starts);
        # leases keep the copies from running at once, but every copy costs a retry.
        log.warning(
            "DEVLOOP_VISIBILITY_TIMEOUT_S (%s) should exceed DEVLOOP_TASK_TIME_LIMIT_S (%s)",
            s.visibility_timeout_s,
            s.task_time_limit_s,
        )
    url = celery_form(url or s.redis_url or "redis://127.0.0.1:6379/0")
    app = Celery("devloop", broker=url, backend=url, include=["workers.tasks"])
    transport = {"visibility_timeout": s.visibility_timeout_s}
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        # A task is acked when it ends, so a worker that dies loses nothing; leases and
        # stored step results keep the redelivered copy from running beside a live one.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_time_limit=s.task_time_limit_s,
        # The soft limit leaves the session a moment to checkpoint before the hard kill.
        task_soft_time_limit=int(max(s.task_time_limit_s * 0.9, s.task_time_limit_s - 60)),
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        # Each queue its own exchange and key: a shared default would fan one task out to all.
        task_queues=[Queue(name, Exchange(name), routing_key=name) for name in QUEUES],
        task_default_queue="control",
        task_routes=ROUTES,
        worker_pool="prefork",  # the threads pool silently ignores time limits
        worker_send_task_events=True,  # Flower sees only events
        task_send_sent_event=True,
        # Nothing reads task results (state lives in DevLoop's own keys; Flower reads
        # events), so skip the backend writes on every hop.
        task_ignore_result=True,
        worker_cancel_long_running_tasks_on_connection_loss=True,
        broker_connection_retry_on_startup=True,
        result_expires=7 * 24 * 3600,
    )
    return app


@worker_process_init.connect
def _die_with_the_worker(**_: object) -> None:
    """A pool process dies with its worker's main process, even mid-session: billiard's own
    check runs only between tasks, and a session can last an hour."""
    follow_parent()
