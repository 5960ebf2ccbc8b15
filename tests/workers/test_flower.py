"""Flower, started against the test broker, lists a run's tasks with their unit and attempt."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from pathlib import Path

from devloop.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.fleet import fleet
from workers.procs import flower_command, spawn, stop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback only
        return json.load(response)


def test_flower_lists_the_runs_tasks_through_its_api(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    port = free_port()
    env = {**os.environ, "DEVLOOP_REDIS_URL": redis_server.celery_url,
           "FLOWER_UNAUTHENTICATED_API": "true"}
    flower = spawn(flower_command(port), env, tmp_path / "flower.log")
    try:
        deadline = time.monotonic() + 30
        while True:  # Flower must be listening before the events it should see are sent
            try:
                get_json(f"http://127.0.0.1:{port}/api/workers")
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "flower.log").read_text()
                time.sleep(0.3)
        plans = [UnitPlan("seen")]
        with fleet(redis_store, redis_server.celery_url, build(tmp_path / "p", plans),
                   script(plans), workers=1) as f:
            f.wait()
        deadline = time.monotonic() + 20
        while True:
            tasks = get_json(f"http://127.0.0.1:{port}/api/tasks")
            assert isinstance(tasks, dict)
            names = {t["name"] for t in tasks.values()}
            if {"devloop.coder", "devloop.tester", "devloop.decide"} <= names:
                break
            assert time.monotonic() < deadline, tasks
            time.sleep(0.5)
        assert "p-fleet:seen:coder:1" in tasks
        coder = tasks["p-fleet:seen:coder:1"]
        assert coder["state"] == "SUCCESS" and "'unit_id': 'seen'" in coder["args"]
        assert "'attempt': 1" in coder["args"]
    finally:
        stop([flower])
