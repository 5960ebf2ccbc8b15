"""A worker's pool processes die with its main process, even in the middle of a session."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.fleet import fleet
from tests.leftovers import views_of_killed_processes
from tests.proctree import alive, descendants

SLACK_S = 30


def test_a_pool_process_mid_session_dies_when_the_worker_is_killed(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    plans = [UnitPlan("slow", coder_latency_ms={2: 120_000})]
    project = build(tmp_path / "p", plans)
    with views_of_killed_processes(), fleet(
        redis_store, redis_server.celery_url, project, script(plans), workers=1
    ) as f:
        deadline = time.monotonic() + 60
        while not [r for r in f.stub.requests if r.turn == 2]:
            assert time.monotonic() < deadline, "turn 2 never started"
            time.sleep(0.1)
        worker = f.workers[0]
        pool = [p.pid for p in descendants(worker.pid)]
        assert pool, "no pool process"
        os.kill(worker.pid, signal.SIGKILL)  # the main process only, not its group
        worker.wait(timeout=10)
        deadline = time.monotonic() + SLACK_S
        while any(alive(pid) for pid in pool):
            assert time.monotonic() < deadline, "a pool process outlived its worker"
            time.sleep(0.1)
