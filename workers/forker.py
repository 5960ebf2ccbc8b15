"""`python -m workers.forker`: the fork server a run's Celery worker nodes are forked from.

It imports what a node and its pool process would (Celery's worker, the tasks, the model
SDK), then forks a node per request (devloop/server/forker.py). Its environment is the
nodes' (the app reads DEVLOOP_* settings here, once).
"""

from __future__ import annotations

from devloop.server.gcpause import collector_paused

with collector_paused():
    import celery.apps.worker  # noqa: F401  (the worker's own modules: each node needs them)
    import celery.bin.celery  # noqa: F401
    import celery.concurrency.prefork  # noqa: F401
    import kombu.transport.redis  # noqa: F401

    import devloop.llm.anthropic  # noqa: F401  (the SDK: every pool process that runs a session)
    import workers.tasks  # noqa: F401
    from devloop.server.forker import serve
    from workers.worker_app import app


def run_node(args: list[str]) -> int:
    """One Celery worker node in this (forked) process: `args` as after `celery -A ...`."""
    app.worker_main(argv=args)
    return 0


if __name__ == "__main__":
    serve(run_node)
