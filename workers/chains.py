"""The chains the library asks for: coder -> tester -> decide, with deterministic ids."""

from __future__ import annotations

import time
from collections.abc import Iterable

from celery import Celery, Signature, chain

from devloop.fleet.messages import Dispatch, StepMsg

CODER, TESTER, DECIDE = "devloop.coder", "devloop.tester", "devloop.decide"


def chain_for(app: Celery, msg: StepMsg) -> chain:
    """The chain of callbacks for one attempt (tester-only after a crashed run); the tasks
    by name, so this module needs none of workers/tasks.py (which sends through it)."""
    data = msg.model_dump(mode="json")

    def step(name: str, *args: object) -> Signature:
        # Sent by name, a task has no ignore_result of its own: without this, each send
        # would subscribe to a result nothing reads.
        return app.signature(name, args=args, immutable=bool(args)).set(
            task_id=msg.task_id(name.removeprefix("devloop.")), ignore_result=True)

    if msg.skip_coder:
        return chain(step(TESTER, data), step(DECIDE))
    return chain(step(CODER, data), step(TESTER), step(DECIDE))


def send_on(app: Celery, dispatches: Iterable[Dispatch]) -> None:
    """Put each chain on its queues."""
    for dispatch in dispatches:
        msg = dispatch.msg.model_copy(update={"sent_at": time.time() + dispatch.countdown_s})
        chain_for(app, msg).apply_async(countdown=dispatch.countdown_s or None)
