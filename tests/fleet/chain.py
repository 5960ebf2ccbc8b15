"""Chains carried in the test's own process: the library's steps in the order Celery would
run them (coder -> tester -> decide), with a StepWaiting slept off as a task retry would."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from devloop.core.config import Settings
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.failures import StepStopped, StepWaiting
from devloop.fleet.messages import Dispatch, StepMsg
from devloop.fleet.steps import StepEnv, decide_step, run_step
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.store import RedisStore, UnitState

T = TypeVar("T")


@dataclass
class Chains:
    """A project enqueued into a store, a stub, and what happened while carrying its chains."""

    store: RedisStore
    stub: StubServer
    env: StepEnv
    pid: str
    dispatches: list[Dispatch]
    waits: list[tuple[str, UnitState]] = field(default_factory=list)  # (step, state then)
    stopped: list[str] = field(default_factory=list)

    def run(self, timeout_s: float = 240) -> None:
        """Carry every chain (and those their decisions send) to its end."""
        deadline = time.monotonic() + timeout_s
        queue = list(self.dispatches)
        while queue:
            assert time.monotonic() < deadline, f"chains still running: {queue}"
            msg = queue.pop(0).msg
            try:
                if not msg.skip_coder:
                    msg = self._again(msg, lambda m=msg: run_step("coder", self.env, m))
                msg = self._again(msg, lambda m=msg: run_step("tester", self.env, m))
                queue += self._again(msg, lambda m=msg: decide_step(self.env, m))
            except StepStopped as stop:
                self.stopped.append(str(stop))

    def _again(self, msg: StepMsg, call: Callable[[], T]) -> T:
        while True:
            try:
                return call()
            except StepWaiting as wait:
                self.waits.append((str(wait), self.store.get_state(msg.pid, msg.unit_id)))
                time.sleep(wait.retry_in_s)

    def requests(self, pattern: str) -> list[tuple[int, int]]:
        """(turn, HTTP status) of every request whose session key contains pattern."""
        return [(r.turn, r.status) for r in self.stub.requests if pattern in r.session_key]


@contextmanager
def chains(
    store: RedisStore, settings: Settings, project: Path, script: dict[str, Any], **changes: Any
) -> Iterator[Chains]:
    """Enqueue project with the stub serving script; settings changed by `changes`."""
    with StubServer(script, record_bodies=True) as stub:
        provider = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
        env = StepEnv(store, settings.model_copy(update=changes), lambda: provider, "test:1")
        report, dispatches = enqueue_project(store, project)
        yield Chains(store, stub, env, report.pid, dispatches)
