"""A decide message is identity only: one that claims green tests, sent through the broker
as Flower's API or anyone who reaches Redis could send it, changes nothing."""

from __future__ import annotations

import time
from pathlib import Path

from devloop.cli.run.procs import spawn, worker_args, worker_command
from devloop.ledgers import Timeline
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.fleet import fleet


def test_a_forged_decide_claiming_green_tests_changes_nothing(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    plans = [UnitPlan("u")]
    project = build(tmp_path / "p", plans)
    with fleet(redis_store, redis_server.celery_url, project, script(plans), workers=0) as f:
        # Only decide is served: the unit's coder and tester sessions never run.
        control = worker_command(worker_args(queues="control", name="ctl@%h"))
        f.workers.append(spawn(control, f.env, f.logs / "control.log"))
        before = redis_store.get_state(f.pid, "u")
        assert (before.status, before.attempt) == ("coding", 1)
        forged = {"pid": f.pid, "unit_id": "u", "attempt": 1, "tester_try": 1,
                  "coder_status": "completed", "tests_ok": True, "crashed": False,
                  "failures": [], "mode": "implement"}
        f.queue.app.send_task("devloop.decide", args=[forged], task_id=f"{f.pid}:u:decide:1")
        # The decide task takes the project's reconcile lock once it has decided.
        lock = f"{redis_store.keys(f.pid).prefix}reconcile-lock"
        deadline = time.monotonic() + 60
        while not redis_store.client.exists(lock):
            assert time.monotonic() < deadline, (f.logs / "control.log").read_text()[-3000:]
            time.sleep(0.1)
        assert redis_store.get_state(f.pid, "u") == before
        assert redis_store.client.hlen(redis_store.keys(f.pid).steps("u")) == 0
        events = Timeline(redis_store.sink(f.pid, "timeline")).events()
        # Only the enqueue's release of the root: no decision of the loop.
        assert [e.kind for e in events if e.kind.startswith("loop_")] == ["loop_release"]
        assert f.requests("") == []  # no session asked the model anything
