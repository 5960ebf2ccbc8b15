"""`python -m workers.forker`: the fork server a run's Celery worker nodes are forked from.

It imports what a node and its pool process would (Celery's worker, the tasks, the model
SDK), then forks a node per request (devloop/server/forker.py). Its environment is the
nodes' (the app reads DEVLOOP_* settings here, once).
"""

from __future__ import annotations

from devloop.server.gcpause import collector_paused

# The `worker` command alone, not `celery`'s whole command line: that one loads every
# plugin's command first (Flower's web stack among them), which no node uses.
with collector_paused():
    import celery.apps.worker  # noqa: F401  (the worker's own modules: each node needs them)
    import celery.concurrency.prefork  # noqa: F401
    import kombu.transport.redis  # noqa: F401
    from celery.bin.base import CLIContext
    from celery.bin.worker import worker

    import devloop.llm.anthropic  # noqa: F401  (the SDK: every pool process that runs a session)
    import workers.tasks  # noqa: F401
    from devloop.server.forker import serve
    from workers.worker_app import app


def run_node(args: list[str]) -> int:
    """One Celery worker node in this (forked) process: `args` as after `celery -A ...`
    (`worker ...`), run as `celery worker` runs them."""
    if args[:1] != ["worker"]:
        raise ValueError(f"a node runs `worker ...`, not {args!r}")
    context = CLIContext(app=app, no_color=False, workdir=None, quiet=False)
    worker.main(args=args[1:], prog_name="celery worker", obj=context, standalone_mode=False)
    return 0


if __name__ == "__main__":
    serve(run_node)
