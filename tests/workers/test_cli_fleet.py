"""The commands for your own fleet, end to end as the README shows them: `enqueue`, `worker`,
`status` (and `--repair`), `pull`, and `unblock` followed by another `devloop run`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
import yaml

from devloop.core.config import DEFAULT_PROJECT_MAX_USD
from devloop.fleet.control import read_control
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.proctree import kill_tree, run_bounded
from tests.workers.runproc import DEVLOOP, RunProcess, clean_env

pytestmark = pytest.mark.timeout(600)


@contextmanager
def worker(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`devloop worker` in the background, stopped with SIGTERM (and killed if it lingers)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([DEVLOOP, "worker", "-c", "1"], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait(timeout=30)


def status(project: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    return run_bounded([DEVLOOP, "status", str(project), *extra], timeout=120, env=env)


def wait_all_passed(project: Path, env: dict[str, str], timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        done = status(project, env, "--json")
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        if all(u["status"] == "passed" for u in rows["units"]):
            return rows
        assert time.monotonic() < deadline, done.stdout
        time.sleep(1)


def test_enqueue_a_worker_status_and_pull(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> None:
    plans = [UnitPlan("a"), UnitPlan("b", ["a"])]
    project = build(tmp_path / "p", plans)
    with StubServer(script(plans)) as stub:
        env = clean_env(DEVLOOP_REDIS_URL=redis_server.celery_url,
                        ANTHROPIC_BASE_URL=stub.base_url, ANTHROPIC_API_KEY="test")
        queued = run_bounded([DEVLOOP, "enqueue", str(project)], timeout=120, env=env)
        assert queued.returncode == 0, queued.stderr
        assert queued.stdout.strip() == "p-fleet: 2 units imported; queued a"
        with worker(env, tmp_path / "worker.log") as proc:
            rows = wait_all_passed(project, env)
        assert proc.returncode == 128 + signal.SIGTERM  # a warm stop, as on Ctrl-C
        assert [(u["unit_id"], u["attempt"]) for u in rows["units"]] == [("a", 1), ("b", 1)]
        # Each row carries its last tester run's coverage of code/ (the test calls value()).
        assert [(u["coverage"]["lines"], u["coverage"]["unexecuted"]) for u in rows["units"]] == [
            (1.0, []), (1.0, [])
        ]
        pulled = run_bounded([DEVLOOP, "pull", str(project), str(tmp_path / "out")],
                             timeout=120, env=env)
        assert pulled.returncode == 0, pulled.stderr
    for unit in ("a", "b"):
        code = (tmp_path / "out" / "units" / unit / "code/unit.py").read_text()
        assert code == "def value():\n    return 42\n"
        result = json.loads((tmp_path / "out/units" / unit / "runs/run-1-1/result.json")
                            .read_text())
        assert result["ok"] is True
        assert result["coverage"]["files"] == {"code/unit.py": {"lines": 1.0}}
    assert (tmp_path / "out/agent-state/fleet-steps.ndjson").is_file()
    # A folder made from Redis alone is a project: it loads, and it reports.
    pulled_project = load_project(tmp_path / "out")
    assert [u.id for u in pulled_project.units.units] == ["a", "b"]
    assert pulled_project.sdd_contracts == load_project(project).sdd_contracts
    report = run_bounded([DEVLOOP, "report", str(tmp_path / "out"), "-o",
                          str(tmp_path / "report.html")], timeout=120)
    assert report.returncode == 0, report.stderr
    # The project folder keeps its own definition: a pull into it writes none.
    again = run_bounded([DEVLOOP, "pull", str(project), str(project)], timeout=120, env=env)
    assert again.returncode == 0, again.stderr
    assert not list((project / "sdd/mvcp").glob("a.html"))



def test_enqueue_gives_the_project_the_cap_in_the_environment_else_the_default(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    project = build(tmp_path / "p", [UnitPlan("a")])
    env = clean_env(DEVLOOP_REDIS_URL=redis_server.celery_url)
    store = RedisStore(redis_server.client())
    assert run_bounded([DEVLOOP, "enqueue", str(project)], timeout=120, env=env).returncode == 0
    control = read_control(store, "p-fleet")
    assert (control.max_usd, control.default_max_usd) == (None, DEFAULT_PROJECT_MAX_USD)
    env["DEVLOOP_PROJECT_MAX_USD"] = "7"
    assert run_bounded([DEVLOOP, "enqueue", str(project)], timeout=120, env=env).returncode == 0
    control = read_control(store, "p-fleet")
    assert (control.max_usd, control.default_max_usd) == (7.0, None)

def test_status_repair_resends_a_unit_whose_task_was_lost(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> None:
    plans = [UnitPlan("a")]
    project = build(tmp_path / "p", plans)
    with StubServer(script(plans)) as stub:
        env = clean_env(DEVLOOP_REDIS_URL=redis_server.celery_url,
                        ANTHROPIC_BASE_URL=stub.base_url, ANTHROPIC_API_KEY="test",
                        DEVLOOP_RECONCILE_GRACE_S="0")
        assert run_bounded([DEVLOOP, "enqueue", str(project)], timeout=120,
                           env=env).returncode == 0
        assert redis_client.delete("coder") == 1  # the broker lost the queued task
        repaired = status(project, env, "--repair")
        assert repaired.returncode == 0, repaired.stderr
        assert "repair: re-sent 1 unit(s)" in repaired.stderr
        assert redis_client.llen("coder") == 1
        with worker(env, tmp_path / "worker.log"):
            wait_all_passed(project, env)


def test_unblock_with_a_hint_then_run_again_passes_the_unit_and_its_dependent(
    tmp_path: Path,
) -> None:
    # Three times the same wrong value blocks "bad" (and "after" waits upstream); the human's
    # hint re-queues it, and its next attempt is right.
    plans = [UnitPlan("bad", coder=["bad", "bad", "bad", "good"]), UnitPlan("after", ["bad"])]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    run = RunProcess(project, workers=1)  # "after" waits on "bad": one worker runs both
    try:
        assert run.start().wait(300) == 1, run.output()
        blocked = status(project, clean_env(), "--json")
        rows = {u["unit_id"]: u for u in json.loads(blocked.stdout)["units"]}
        assert (rows["bad"]["status"], rows["after"]["status"]) == ("blocked", "blocked_upstream")
        hint = run_bounded([DEVLOOP, "unblock", str(project), "bad", "--hint",
                            "value() must return 42, as the contract says"],
                           timeout=120, env=clean_env())
        assert hint.returncode == 0, hint.stderr
        assert run.start().wait(300) == 0, run.output()
    finally:
        run.close()
    final = {u["unit_id"]: u for u in json.loads(status(project, clean_env(), "--json")
                                                 .stdout)["units"]}
    assert (final["bad"]["status"], final["bad"]["attempt"]) == ("passed", 4)
    assert (final["after"]["status"], final["after"]["attempt"]) == ("passed", 1)


STATUS_LOADS = """
import sys
from workers.main import main
sys.argv = ["devloop", "status", sys.argv[1], "--json"]
try:
    main()
finally:
    print(" ".join(sorted(sys.modules)), file=sys.stderr)
"""


def test_status_loads_neither_the_runs_machinery_nor_the_steps_nor_the_model_client(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A command loads what it uses: `status` reads the store, and the run's supervisor, the
    dispatch, the roles, the runners and the SDK are most of a command's start-up."""
    project = build(tmp_path / "p", [UnitPlan("a")])
    env = clean_env(DEVLOOP_REDIS_URL=redis_server.celery_url)
    assert run_bounded([DEVLOOP, "enqueue", str(project)], timeout=120, env=env).returncode == 0
    done = run_bounded([sys.executable, "-c", STATUS_LOADS, str(project)], timeout=120, env=env)
    redis_server.client().delete("coder")  # no worker of another test may take it
    assert done.returncode == 0, done.stderr
    assert [u["unit_id"] for u in json.loads(done.stdout)["units"]] == ["a"]
    loaded = set(done.stderr.split())
    assert "devloop.fleet.status" in loaded  # it did read the project
    heavy = {"devloop.cli.run.project_run", "devloop.cli.run.children", "devloop.fleet.dispatch",
             "devloop.fleet.wipe", "devloop.roles.tester", "devloop.agent.loop",
             "devloop.runners.pytest", "workers.tasks", "anthropic"}
    assert loaded & heavy == set()
