"""Ctrl-C and resume as a user meets them: the run says what it left mid-flight, `status`
shows those units `interrupted` with their elapsed time frozen, and the next run says it
resumes."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devloop.core.config import Settings
from devloop.server.embedded import redis_endpoint
from devloop.server.redis_data import AOF_DIR, check_data_dir
from devloop.server.redis_server import connect
from tests.fleet.builder import UnitPlan, build, script
from tests.leftovers import views_of_killed_processes
from tests.workers.runproc import RunProcess
from tests.workers.test_run_ends import devloop, rows

pytestmark = pytest.mark.timeout(900)
SLOW_TURN_MS = 20_000  # the slow unit's coder is still in its second turn at Ctrl-C


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunProcess]:
    plans = [UnitPlan("slow", coder_latency_ms={2: SLOW_TURN_MS}), UnitPlan("quick")]
    root = build(tmp_path / "p", plans)
    (root / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    handle = RunProcess(root)
    with views_of_killed_processes():
        yield handle
        handle.close()


def passed(project: Path, unit: str) -> bool:
    timeline = project / "timeline.ndjson"
    return timeline.exists() and any(
        e.get("kind") == "loop_pass" and e.get("unit_id") == unit
        for e in map(json.loads, timeline.read_text().splitlines())
    )


def test_ctrl_c_leaves_interrupted_units_with_frozen_elapsed_and_the_next_run_resumes(
    run: RunProcess, python_toolchain_dir: Path
) -> None:
    p = run.project
    run.start()
    run.wait_for("quick to pass", lambda: passed(p, "quick"), timeout_s=240)
    run.signal(signal.SIGINT)
    assert run.wait(60) == 130, run.output()
    said = run.err.read_text()
    assert re.search(r"interrupted: 1 unit\(s\) mid-flight, 1 of 2 passed; "
                     rf"run `devloop run {re.escape(str(p))}` again to resume", said), said

    first = rows(p)
    assert first["slow"]["status"] == "interrupted" and first["quick"]["status"] == "passed"
    assert first["slow"]["reason"] == ("interrupted: no worker runs it (the run that drove "
                                       "it stopped)")
    time.sleep(2)
    # Only time with a live step counts: nothing runs it, so its elapsed time stands still.
    assert rows(p)["slow"]["elapsed_s"] == first["slow"]["elapsed_s"]
    assert "interrupted" in devloop("status", str(p), timeout=120).stdout

    assert run.start().wait(300) == 0, run.output()
    assert run.out.read_text().count("resuming: 1 passed, 1 to go\n") == 1
    assert rows(p)["slow"]["status"] == "passed"


def test_a_real_runs_aof_holds_only_allowed_commands_and_resumes(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    """What DevLoop's own writes leave in the AOF (a pass, a retry, a unit blocked and its
    dependent held back), and the server's rewrite of it, pass the check before a start."""
    plans = [UnitPlan("base"), UnitPlan("retried", deps=["base"], coder=["bad", "good"]),
             UnitPlan("stuck", bad=True), UnitPlan("after-stuck", deps=["stuck"])]
    p = build(tmp_path / "p", plans)
    (p / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    done = devloop("run", str(p), "--llm", "stub", "--workers", "2", timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr  # one unit blocked
    state = p / ".devloop"
    check_data_dir(state, appendonly=True)
    logged = sum(f.stat().st_size for f in (state / AOF_DIR).glob("*.aof"))
    before = {unit: (row["status"], row["attempt"]) for unit, row in rows(p).items()}
    assert before["retried"] == ("passed", 2) and before["stuck"][0] == "blocked"

    with redis_endpoint(p, Settings(redis_url=None)) as endpoint:  # the server rewrites it
        client = connect(endpoint.url)
        client.bgrewriteaof()
        deadline = time.monotonic() + 120
        while (info := client.info("persistence"))["aof_rewrite_in_progress"] or info[
                "aof_rewrite_scheduled"]:
            assert time.monotonic() < deadline, info
            time.sleep(0.1)
        assert info["aof_last_bgrewrite_status"] == "ok"
        client.close()
    bases = [f for f in (state / AOF_DIR).glob("*.base.aof") if f.stat().st_size]
    assert bases and logged, "the rewrite left no base holding the data"
    check_data_dir(state, appendonly=True)
    after = {unit: (row["status"], row["attempt"]) for unit, row in rows(p).items()}
    assert after == before  # resumed from the rewritten AOF
