"""The three tasks: decode the message, call the library, encode the result (shared tasks:
they join whichever app workers/app.py makes)."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from celery import Celery, Task, shared_task
from celery.events import EventDispatcher
from celery.exceptions import Ignore

from devloop.agent.tools import ProgressEvent
from devloop.core.config import Settings, load_settings
from devloop.fleet.dispatch import reconcile
from devloop.fleet.failures import StepStopped, StepWaiting
from devloop.fleet.messages import StepMsg, StepRole
from devloop.fleet.status import StepProgress, record_progress
from devloop.fleet.steps import StepBusy, StepEnv, decide_step, run_step
from devloop.server.gcpause import collector_paused
from devloop.store import RedisStore
from devloop.store.base import StoreError, StoreUnavailable
from workers.chains import CODER, DECIDE, TESTER, send_on

if TYPE_CHECKING:
    from devloop.llm.anthropic import AnthropicProvider

log = logging.getLogger(__name__)
T = TypeVar("T")


@cache
def settings() -> Settings:
    """This worker process's settings (its environment does not change; reading it does cost
    most of a millisecond)."""
    return load_settings()


@cache
def store() -> RedisStore:
    """This worker process's store (one connection pool per process)."""
    url = settings().redis_url or "redis://127.0.0.1:6379/0"  # from_url reads Celery's forms
    return RedisStore.from_url(url, file_cap_bytes=settings().file_cap_bytes)


@cache
def provider() -> AnthropicProvider:
    """This worker process's model client (its TLS set-up costs tens of ms: build it once)."""
    # Imported here, in the pool process that runs a session: the SDK's import is about a
    # CPU-second, and a worker's main process (which only routes tasks) never needs it (a
    # run's workers are forked from the fork server, which has it already: workers/forker.py;
    # `devloop worker` starts one on its own). The collector paused: see gcpause.
    with collector_paused():
        from devloop.llm.anthropic import AnthropicProvider

    return AnthropicProvider()


@cache
def events(app: Celery, hostname: str) -> EventDispatcher:
    """This worker process's event dispatcher, kept open.

    Task.send_event opens a dispatcher (and a Redis client) per event, about twice the
    cost; a session reports progress a dozen times.
    """
    return app.events.Dispatcher(app.connection_for_write(), hostname=hostname)


class Progress:
    """A step's task-progress events: the whole picture (step, total, turn, tokens, note)
    each time, sent only when it changed (Flower shows the last one, as state PROGRESS).

    The unit's last step (role, step/total, turn, last tool) is also kept in Redis, where
    the live table and `devloop status` read it.
    """

    FIELDS = ("step", "total", "turn", "tokens", "note")

    def __init__(self, task: Task, msg: StepMsg, role: str) -> None:
        self.task, self.msg = task, msg
        self.shown: dict[str, int | str | None] = dict.fromkeys(self.FIELDS)
        self.kept = StepProgress(role=role, attempt=msg.attempt, since=time.time())
        self.stored = False

    def _keep(self, event: ProgressEvent) -> None:
        """Store the unit's last step when it changed (a lost write only dims the view)."""
        tool = event.detail.get("name") if event.kind == "tool" else self.kept.tool
        kept = self.kept.model_copy(update={
            "step": event.step if event.step is not None else self.kept.step,
            "total": event.total if event.total is not None else self.kept.total,
            "turn": event.turn if event.turn is not None else self.kept.turn,
            "tool": tool if isinstance(tool, str) else None,
        })
        if kept == self.kept and self.stored:
            return
        self.kept, self.stored = kept, True
        try:
            record_progress(store(), self.msg.pid, self.msg.unit_id, kept)
        except StoreError as lost:
            log.info("progress of %s not kept: %s", self.msg.unit_id, lost)

    def __call__(self, event: ProgressEvent) -> None:
        self._keep(event)
        now = {k: getattr(event, k) if getattr(event, k) is not None else v
               for k, v in self.shown.items()}
        if now == self.shown:
            return  # a tool call with nothing new to show
        self.shown = now
        request = self.task.request
        app = self.task.app
        events(app, request.hostname).send(
            "task-progress",
            uuid=request.id,
            retry=True,
            retry_policy=app.conf.task_publish_retry_policy,
            unit=self.msg.unit_id,
            attempt=self.msg.attempt,
            kind=event.kind,
            **now,
        )


def _env(task: Task, msg: StepMsg, role: str) -> StepEnv:
    return StepEnv(
        store(),
        settings(),
        provider,
        owner=f"{socket.gethostname()}:{os.getpid()}:{task.request.id}",
        emit=Progress(task, msg, role),
        lease_ttl_s=settings().lease_ttl_s,
        heartbeat_s=settings().lease_ttl_s / 4,
    )


def _carried(task: Task, call: Callable[[], T]) -> T:
    """Run a step's library call; map how it could not end to Celery's retry or Ignore."""
    try:
        return call()
    except StepBusy as busy:
        _later(task, busy)
    except StepWaiting as later:
        # The tasks' max_retries is None: DevLoop bounds waits and retries itself.
        raise task.retry(countdown=later.retry_in_s) from later
    except StepStopped as stop:
        log.warning("%s", stop)
        raise Ignore() from stop  # no callbacks: the chain stops here
    except StoreUnavailable as lost:
        # Redis went away for longer than the client's retries: run again from the checkpoint.
        raise task.retry(countdown=5) from lost


def _later(task: Task, busy: StepBusy) -> NoReturn:
    """Send this task's message again after the lease's time, quietly: a step whose lease a
    live run holds is a healthy wait, not a failure, so no retry event (and no traceback
    in Flower) and no retry counted; one line in the worker's log."""
    request = task.request
    again = task.signature_from_request(request, countdown=busy.retry_in_s,
                                        retries=request.retries)
    again.apply_async()
    log.info("%s", busy)
    raise Ignore()


def _step(task: Task, role: StepRole, raw: dict[str, Any]) -> dict[str, Any]:
    msg = StepMsg.model_validate(raw)
    env = _env(task, msg, role)
    return _carried(task, lambda: run_step(role, env, msg).model_dump(mode="json"))


@shared_task(name=CODER, bind=True, max_retries=None)
def coder(self: Task, msg: dict[str, Any]) -> dict[str, Any]:
    """Write or fix a unit's code."""
    return _step(self, "coder", msg)


@shared_task(name=TESTER, bind=True, max_retries=None)
def tester(self: Task, msg: dict[str, Any]) -> dict[str, Any]:
    """Write and run (or re-run) a unit's tests."""
    return _step(self, "tester", msg)


@shared_task(name=DECIDE, bind=True, max_retries=None)
def decide(self: Task, msg: dict[str, Any]) -> list[str]:
    """Decide the unit's next step, send the chains it needs, and reconcile now and then.

    The message names the unit, attempt and try; the outcome is read from the records
    the coder and tester steps stored (any outcome field in the message is dropped).
    """
    step = StepMsg.model_validate(msg)
    dispatches = _carried(self, lambda: decide_step(_env(self, step, "decide"), step))
    # At most one reconcile pass per project per grace period, whichever decide gets there.
    if store().take_reconcile_lock(step.pid, max(1, int(settings().reconcile_grace_s))):
        dispatches += reconcile(store(), step.pid, settings().reconcile_grace_s)
    send_on(self.app, dispatches)
    return [d.msg.task_id("coder") for d in dispatches]
