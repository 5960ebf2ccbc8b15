"""A command whose Redis is unreachable, or goes away under it, says so in one line (exit 3);
`devloop status` whose live run ends mid-look answers from the folder instead."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from devloop.core.config import load_settings
from devloop.fleet.dispatch import enqueue_project
from devloop.server.embedded import redis_endpoint
from devloop.server.redis_server import connect
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build
from tests.proctree import kill_tree
from tests.workers.runproc import DEVLOOP, clean_env

# Each command waits out the client's retries (about 17 s) once or twice; a busy machine
# stretches that.
pytestmark = pytest.mark.timeout(240)
GONE = "redis://127.0.0.1:1/0"  # a port nothing listens on
COMMANDS = [["status", "p-x"], ["pull", "p-x", "out"], ["unblock", "p-x", "a"], ["enqueue", "p"]]


def test_a_command_on_an_unreachable_redis_says_so_in_one_line_with_exit_3(
    tmp_path: Path,
) -> None:
    """After the client's retries (about 17 s, long enough to outlast a restart): started
    side by side, so the test waits them out once."""
    build(tmp_path / "p", [UnitPlan("a")])
    env = clean_env(DEVLOOP_REDIS_URL=GONE)
    started = [subprocess.Popen([DEVLOOP, *command], cwd=tmp_path, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for command in COMMANDS]
    try:
        for command, proc in zip(COMMANDS, started, strict=True):
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 3, (command, out, err)
            [line] = err.splitlines()
            assert line.startswith("Redis: unreachable (ConnectionError: "), line
            assert "127.0.0.1:1" in line and line.endswith("then run the command again"), line
            assert "Traceback" not in out + err
    finally:
        for proc in started:
            kill_tree(proc.pid)


def test_status_whose_live_run_ends_mid_look_answers_from_the_folder(tmp_path: Path) -> None:
    """The run's Redis (started here as `devloop run` starts it) stops while status waits for
    workers to answer: status looks again, at the folder's own data (seen as a traceback
    from a console test on a busy machine)."""
    project = build(tmp_path / "p", [UnitPlan("a")])
    settings = load_settings().model_copy(update={"redis_url": None})
    status: subprocess.Popen[str] | None = None
    try:
        with redis_endpoint(project, settings) as endpoint:
            client = connect(endpoint.url)
            enqueue_project(RedisStore(client), project)
            status = subprocess.Popen([DEVLOOP, "status", str(project), "--json"],
                                      env=clean_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60
            # The ping's reply queue is bound when status asks the workers: it is mid-look.
            while not client.keys("_kombu.binding.reply.*"):
                assert status.poll() is None and time.monotonic() < deadline, status.stderr
                time.sleep(0.02)
        # The block's end stopped the run's Redis, with status waiting for answers on it.
        out, err = status.communicate(timeout=120)
    finally:
        if status is not None:
            kill_tree(status.pid)
    assert status.returncode == 0, err
    assert "Traceback" not in err
    assert [u["unit_id"] for u in json.loads(out)["units"]] == ["a"]
