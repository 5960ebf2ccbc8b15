"""The task-queue port: what the fleet needs of a queue, so devloop/ never imports one.

workers/celery_queue.py implements it on Celery; `devloop` gets that implementation from its
entry point (workers/main.py), never by import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from devloop.core.errors import DevLoopError
from devloop.fleet.messages import Dispatch


class QueueUnreachable(DevLoopError):
    """The queue's broker did not answer (a Redis restart, or a shared one gone)."""


class TaskQueue(Protocol):
    """Sends the steps the library decides on, and takes back the ones a person cancels."""

    def connect(self, url: str) -> None:
        """Use the broker at this Redis URL from now on (the run's embedded one, a test's)."""

    def send(self, dispatches: Iterable[Dispatch]) -> None:
        """Put each dispatch's chain (coder -> tester -> decide) on its queues
        (QueueUnreachable when the broker does not answer)."""

    def revoke(self, task_ids: Iterable[str]) -> None:
        """Tell every worker to drop these tasks when they come (a cancel)."""

    def consumers(self, timeout_s: float) -> dict[str, list[str]]:
        """Each live worker -> the queues it consumes, as they answer within timeout_s
        (QueueUnreachable when the broker does not answer)."""
