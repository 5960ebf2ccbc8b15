"""Send the chains the library asks for: coder -> tester -> decide, with deterministic ids."""

from __future__ import annotations

import time
from collections.abc import Iterable

from celery import chain

from devloop.fleet.messages import Dispatch, StepMsg


def chain_for(msg: StepMsg) -> chain:
    """The chain of callbacks for one attempt (tester-only after a crashed run)."""
    from workers.tasks import coder, decide, tester

    data = msg.model_dump(mode="json")
    decide_sig = decide.s().set(task_id=msg.task_id("decide"))
    if msg.skip_coder:
        return chain(tester.si(data).set(task_id=msg.task_id("tester")), decide_sig)
    return chain(
        coder.si(data).set(task_id=msg.task_id("coder")),
        tester.s().set(task_id=msg.task_id("tester")),
        decide_sig,
    )


def send(dispatches: Iterable[Dispatch]) -> None:
    """Put each chain on its queues."""
    for dispatch in dispatches:
        msg = dispatch.msg.model_copy(update={"sent_at": time.time() + dispatch.countdown_s})
        chain_for(msg).apply_async(countdown=dispatch.countdown_s or None)


def revoke(task_ids: Iterable[str]) -> None:
    """Tell every worker to drop these tasks when they come (a cancel); a task already
    running is not killed: its session stops by itself before its next turn."""
    from workers.app import app

    ids = list(task_ids)
    if ids:
        app.control.revoke(ids)
