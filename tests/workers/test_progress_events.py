"""A running session reports task-progress events that Flower (or any monitor) receives."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.fleet import fleet
from workers.celery_queue import CeleryQueue


class Listener:
    """A Celery event receiver on its own thread, collecting task-progress events."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.progress: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []  # every other event
        self.ready = threading.Event()
        self.connection = app.connection_for_read()
        self.receiver = app.events.Receiver(
            self.connection,
            handlers={"task-progress": self.progress.append, "ping": self._ping,
                      "*": self.events.append},
        )
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _ping(self, event: dict[str, Any]) -> None:
        self.ready.set()

    def _run(self) -> None:
        self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def __enter__(self) -> Listener:
        self.thread.start()
        # Events are pub/sub: only a subscribed receiver sees them, so ping until it does.
        deadline = time.monotonic() + 10
        while not self.ready.wait(0.2):
            assert time.monotonic() < deadline, "the event receiver never subscribed"
            with self.app.events.default_dispatcher(hostname="test") as dispatcher:
                dispatcher.send("ping")
        return self

    def __exit__(self, *exc: object) -> None:
        self.receiver.should_stop = True
        self.thread.join(timeout=5)
        self.connection.release()


@pytest.mark.timeout(120)
def test_sessions_send_progress_with_step_total_turn_and_tokens(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    plans = [UnitPlan("shown")]
    queue = CeleryQueue()
    queue.connect(redis_server.celery_url)
    with Listener(queue.app) as listener, fleet(
        redis_store, redis_server.celery_url, build(tmp_path / "p", plans), script(plans),
        workers=1,
    ) as f:
        assert f.wait().all_passed
        time.sleep(0.5)  # the last events are on their way
    by_task: dict[str, list[dict[str, Any]]] = {}
    for event in listener.progress:
        by_task.setdefault(event["uuid"], []).append(event)
    assert set(by_task) == {"p-fleet:shown:coder:1", "p-fleet:shown:tester:1"}
    coder = by_task["p-fleet:shown:coder:1"]
    assert all(e["unit"] == "shown" and e["attempt"] == 1 for e in coder)
    shown = [tuple(e[k] for k in ("step", "total", "turn", "tokens")) for e in coder]
    assert len(shown) == len(set(shown)), "an event was sent with nothing new to show"
    last = coder[-1]
    # The coder's plan has one item, ticked done; its third turn finished the session.
    assert (last["step"], last["total"], last["turn"]) == (1, 1, 3) and last["tokens"] > 0
    tokens = [e["tokens"] for e in coder if e["tokens"] is not None]
    assert tokens == sorted(tokens)


@pytest.mark.timeout(120)
def test_a_step_that_waits_on_a_busy_lease_is_sent_again_quietly(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path,
    python_toolchain_dir: Path,
) -> None:
    plans = [UnitPlan("held")]
    project = build(tmp_path / "p", plans)
    # A live run elsewhere holds the step's lease (its owner is not this fleet) until the
    # worker has met it once, however long the worker takes to start on a busy machine.
    lease = redis_store.keys("p-fleet").lease("held", 1, "coder")
    redis_store.client.set(lease, "another-host:1:task", px=300_000)
    queue = CeleryQueue()
    queue.connect(redis_server.celery_url)

    def coder_events() -> list[dict[str, Any]]:
        return [e for e in list(listener.events) if e.get("uuid") == "p-fleet:held:coder:1"]

    with Listener(queue.app) as listener, fleet(
        redis_store, redis_server.celery_url, project, script(plans), workers=1,
        settings_env={"DEVLOOP_LEASE_TTL_S": "2"},
    ) as f:
        deadline = time.monotonic() + 240
        while not any(e["type"] == "task-received" for e in coder_events()):
            assert time.monotonic() < deadline, "the coder step never reached the worker"
            time.sleep(0.2)
        time.sleep(1)  # it finds the lease held and is sent again
        redis_store.client.delete(lease)  # the other run lets go
        assert f.wait().all_passed
        time.sleep(0.5)  # the last events are on their way
    coder = coder_events()
    kinds = [e["type"] for e in coder]
    assert kinds.count("task-received") >= 2, kinds  # it waited, then ran
    # Flower shows a retry (and its traceback) only from task-retried / task-failed events.
    assert "task-retried" not in kinds and "task-failed" not in kinds, kinds
    assert {e.get("retries") for e in coder if e["type"] == "task-received"} == {0}
    assert kinds[-1] == "task-succeeded"
