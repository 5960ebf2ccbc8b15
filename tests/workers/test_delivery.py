"""At-least-once delivery: the Celery settings the safety claim of docs/architecture.md rests on."""

from __future__ import annotations

from workers.app import make_app


def test_tasks_are_acked_late_one_at_a_time_in_a_prefork_pool() -> None:
    conf = make_app().conf
    # Acked when it ends (a worker that dies mid-task loses nothing), and re-queued when
    # the pool process running it is lost.
    assert conf.task_acks_late is True and conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1  # no task waits behind a long one
    assert conf.worker_pool == "prefork"  # the threads pool ignores time limits
