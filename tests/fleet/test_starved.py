"""A test run starved of CPU by busy neighbours is starved, not red and not blamed on the code,
and is re-run after a backoff.

Real workers, real Redis, real pytest in the real sandbox, and real starvation: busy
neighbours (one per CPU, each in a session of its own at nice 0) beside sandboxes with no
cgroup weight at nice 19 (a whole sandbox session weighs 15 against each neighbour's 1024).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from devloop.core.models import RunResult
from devloop.fleet.status import load_note
from devloop.ledgers import BugLedger, Timeline
from devloop.sandbox.slots import cpu_count
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, _turn, build, script
from tests.fleet.fleet import fleet
from tests.fleet.test_fleet import coder_log

# The re-run waits 1 s, not the default 15: the neighbours are gone well before it (they
# are killed as soon as the starved run's result.json is there).
STARVING = {"DEVLOOP_SANDBOX_NICE": "19", "DEVLOOP_SANDBOX_CPU_SHARES": "0",
            "DEVLOOP_STARVED_BACKOFF_S": "1"}
SPINNING_TEST = (
    "import time\nfrom unit import value\n\n\ndef test_value_returns_42():\n"
    "    end = time.thread_time() + 0.5\n    while time.thread_time() < end:\n        pass\n"
    "    assert value() == 42\n"
)


@pytest.mark.alone  # its busy neighbours would starve the other tests' fleets too
@pytest.mark.timeout(400)
def test_a_starved_test_run_is_re_run_after_a_backoff_and_never_sent_to_the_coder(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    plans = [UnitPlan("one")]
    project = build(tmp_path / "p", plans)
    turns = script(plans)
    tester = turns["sessions"]["tester.*.one"]["turns"]
    # A test that needs half a second of CPU (and its run as much again to start), run with
    # a 2 s limit: starved, the run gets a small part of that in 3 x 2 s of wall time and is
    # killed as starved; on a free machine it passes at once. (Not 1.5 s: the run's start
    # also sleeps, about 1.4 s of it, and given that much time a run starved of CPU was
    # killed at its limit as a hang in 2 of 6 runs.)
    tester[1] = _turn(
        ("write_todolist", {"items": [{"id": "step-001", "title": "test value()"}]}),
        ("Write", {"path": "tests/test_unit.py", "content": SPINNING_TEST}),
    )
    tester[2] = _turn(("run_tests", {"timeout_s": 2}))
    neighbours = [
        subprocess.Popen(["sh", "-c", "while :; do :; done"], start_new_session=True)
        for _ in range(cpu_count())
    ]

    def stop_neighbours() -> None:
        for proc in neighbours:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    notes: list[str] = []
    try:
        with fleet(redis_store, redis_server.celery_url, project, turns, workers=1,
                   settings_env=STARVING) as f:
            deadline = time.monotonic() + 240
            first = None
            while first is None and time.monotonic() < deadline:
                first = redis_store.unit_file(f.pid, "one", "runs/run-1-1/result.json")
                time.sleep(0.2)
            stop_neighbours()  # the machine is free again before the re-run
            while not f.status().finished and time.monotonic() < deadline:
                notes += [r.note for r in f.status().units if r.note]
                time.sleep(0.2)
            final = f.wait(timeout_s=120)
    finally:
        stop_neighbours()
    assert first is not None
    # Starved: neither green nor red, and not the code's fault (nothing failed, no bug).
    starved = RunResult.model_validate_json(first)
    assert starved.starved and not starved.ok and not starved.crashed, starved.crash_reason
    assert starved.next_action == "retry_tester" and starved.failures == []
    assert starved.starved_reason is not None
    assert starved.starved_reason.startswith("the machine was too busy to run the tests")
    assert starved.wait_s is not None and starved.wall_s is not None
    assert starved.wait_s > 0.5 * starved.wall_s  # it waited for a CPU most of the time
    [row] = final.units
    assert (row.status, row.attempt) == ("passed", 1)  # the coder was never sent back
    assert coder_log(redis_store, f.pid, "one") == [1]
    assert any("starved" in note for note in notes)  # status and the live table said so
    events = Timeline(redis_store.sink(f.pid, "timeline")).events(unit_id="one")
    loop = [(e.kind, e.summary) for e in events if e.agent == "loop" and e.kind != "loop_release"]
    assert loop[0][0] == "loop_retry_tester" and "starved" in loop[0][1]
    assert "re-run in 1 s" in loop[0][1]  # DEVLOOP_STARVED_BACKOFF_S reached the worker
    assert loop[-1][0] == "loop_pass"
    # The re-run was the tests alone, again, on the free machine: green.
    assert ("test_passed", "run-1-2") in [(e.kind, e.ref) for e in events]
    assert BugLedger(redis_store.sink(f.pid, "bugs")).list(unit_id="one") == []


def test_the_status_note_names_starved_re_runs() -> None:
    testing = UnitState(status="testing", attempt=1, extra={"starved_reruns": 2})
    assert load_note(testing) == "test run starved of CPU 2x: re-run after a backoff"
    assert load_note(UnitState(status="testing", attempt=1)) is None
