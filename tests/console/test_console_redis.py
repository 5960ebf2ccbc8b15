"""A standalone console keeps the project's Redis: a run's is adopted when the run ends, so
the console still shows the project after it."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.error
from pathlib import Path

import pytest

from devloop.fleet.dispatch import enqueue_project
from devloop.server.embedded import MARKER, running_server
from devloop.server.redis_server import connect
from devloop.store import RedisStore
from tests.console.squatter import get, opener
from tests.fleet.builder import UnitPlan, build
from tests.proctree import kill_tree
from tests.workers.runproc import DEVLOOP, clean_env, end, redis_owner

LINK = re.compile(r"DevLoop console: (http://127\.0\.0\.1:\d+/\?token=\S+)")
ADOPTED = "Redis was stopped by the command that started it, and started again here"


def _page(url: str, within_s: float) -> str | None:
    """The console's page once it answers 200, or None after within_s."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            return get(opener(), url, timeout_s=30)
        except (urllib.error.URLError, OSError, AssertionError):
            time.sleep(0.5)
    return None


@pytest.mark.timeout(180)
def test_a_console_on_a_runs_redis_still_shows_the_project_after_the_run_ends(
    tmp_path: Path,
) -> None:
    project = build(tmp_path / "p", [UnitPlan("a")])
    out = tmp_path / "console.out"
    with redis_owner(project) as owner:  # as `devloop run`, started first
        endpoint = running_server(project / ".devloop")
        assert endpoint is not None
        store = RedisStore(connect(endpoint.url))
        enqueue_project(store, project)
        store.close()
        with open(out, "wb") as sink:
            console = subprocess.Popen([DEVLOOP, "console", str(project)], stdout=sink,
                                       stderr=subprocess.STDOUT, env=clean_env())
        try:
            found: list[str] = []
            for _ in range(600):
                found = LINK.findall(out.read_text())
                if found or console.poll() is not None:
                    break
                time.sleep(0.1)
            assert found, out.read_text()
            assert "p-fleet · DevLoop console" in (_page(found[0], 60) or "")
            end(owner)  # the run ends and stops its Redis
            # The console takes the server over, on the same socket, password and data.
            assert "p-fleet · DevLoop console" in (_page(found[0], 60) or ""), (
                out.read_text())
            assert ADOPTED in out.read_text()
            console.send_signal(signal.SIGTERM)  # stops as Ctrl-C does, cleaning up
            assert console.wait(timeout=30) == 128 + signal.SIGTERM
        finally:
            if console.poll() is None:
                kill_tree(console.pid)
                console.wait(timeout=30)
    # It stopped the server it adopted, and its records with it.
    assert not (project / ".devloop" / MARKER).exists()
    assert not (project / ".devloop" / "redis.sock").exists()
