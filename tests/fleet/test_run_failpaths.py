"""One `devloop run` where each failure path happens to a different unit, and the run ends
by itself with the right statuses and exit code."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from devloop.fleet.records import steps_of
from devloop.ledgers import BugLedger, Timeline, parse_coder_log
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import MOCK_TESTS, UnitPlan, build, script
from tests.proctree import kill_tree
from tests.workers.test_cli_run import DEVLOOP
from workers.celery_queue import CeleryQueue

PID = "p-fleet"
PLANS = [
    # A decide message claiming green tests arrives while its first coder turn is running.
    UnitPlan("forged", bad=True, coder_latency_ms={1: 4000}),
    # Its folder holds a suite mocking the code; its first coder attempt fails validation,
    # so the second attempt's tester finds that suite for a zero-token re-run.
    UnitPlan("mocked", coder=["unbridged", "bad", "good"], seeded_tests=MOCK_TESTS),
    # Its tester's first try fails its own self-check (a mock); the tester tries again.
    UnitPlan("selfcheck", tester=["mock", "proper"]),
    # Red once, then fixed: its bug goes open -> fixing -> fixed.
    UnitPlan("fixing", coder=["bad", "good"]),
    # The model is overloaded for one round of the provider's retries, then answers.
    UnitPlan("outage", coder_faults={1: {"kind": "overloaded", "times": 5}}),
    # The model never answers; its dependent waits on it.
    UnitPlan("down", coder_faults={1: {"kind": "overloaded", "times": 10**6}}),
    UnitPlan("needs-down", ["down"]),
    # Its checkpoint cannot be read: every start of its coder step raises.
    UnitPlan("broken"),
]
SETTINGS = {
    "DEVLOOP_MODEL_RETRY_BASE_S": "1",
    "DEVLOOP_RETRY_MAX_S": "2",
    "DEVLOOP_MODEL_WAIT_TOTAL_S": "25",
    "DEVLOOP_STEP_RETRIES": "2",
    "DEVLOOP_STEP_RETRY_BASE_S": "1",
}


def kinds(store: RedisStore, unit: str) -> list[str]:
    return [e.kind for e in Timeline(store.sink(PID, "timeline")).events() if e.unit_id == unit]


def attempts_logged(store: RedisStore, unit: str) -> list[int]:
    raw = store.unit_files(PID, unit).files.get("coder.log", b"").decode()
    return [d.attempt for d in parse_coder_log(raw)]


def send_forged_decide(
    store: RedisStore, proc: subprocess.Popen[str], queue: CeleryQueue
) -> None:
    """As Flower's API would: devloop.decide for "forged", saying its tests are green."""
    deadline = time.monotonic() + 60
    while store.get_state(PID, "forged").status != "coding":
        assert time.monotonic() < deadline and proc.poll() is None, "forged never started"
        time.sleep(0.1)
    assert steps_of(store, PID, ["forged"])["forged"] == []  # no session of it has ended
    forged = {"pid": PID, "unit_id": "forged", "attempt": 1, "tester_try": 1,
              "coder_status": "completed", "tests_ok": True, "failures": []}
    queue.app.send_task("devloop.decide", args=[forged], task_id=f"{PID}:forged:decide:1")


@pytest.mark.timeout(300)
def test_every_failure_path_in_one_run_ends_by_itself_with_the_right_statuses(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    project = build(tmp_path / "p", PLANS)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(PLANS)))
    redis_store.client.set(redis_store.keys(PID).session("coder", "broken"), b"{oops")
    queue = CeleryQueue()
    queue.connect(redis_server.celery_url)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_", "ANTHROPIC_"))}
    env |= {**SETTINGS, "DEVLOOP_REDIS_URL": redis_server.url, "COLUMNS": "200",
            "DEVLOOP_VIEWS_DIR": os.environ["DEVLOOP_VIEWS_DIR"],
            "DEVLOOP_TEST_RUN": os.environ["DEVLOOP_TEST_RUN"]}
    started = time.monotonic()
    proc = subprocess.Popen([DEVLOOP, "run", str(project), "--llm", "stub", "--workers", "4"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        send_forged_decide(redis_store, proc, queue)
        out, err = proc.communicate(timeout=240)
    finally:
        kill_tree(proc.pid)
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, out[-4000:] + err
    assert "Traceback" not in out + err
    rows = {u: redis_store.get_state(PID, u) for u in [p.id for p in PLANS]}
    assert {u: (s.status, s.attempt) for u, s in rows.items()} == {
        "forged": ("blocked", 3),
        "mocked": ("passed", 3),
        "selfcheck": ("passed", 1),
        "fixing": ("passed", 2),
        "outage": ("passed", 1),
        "down": ("blocked", 1),
        "needs-down": ("blocked_upstream", 0),
        "broken": ("blocked", 1),
    }, f"after {elapsed:.0f} s:\n{out[-4000:]}"

    # The forged decide passed nothing: "forged" was decided only from its red runs.
    assert "loop_pass" not in kinds(redis_store, "forged")
    assert rows["forged"].blocked_reason == "the same failure 3 times"
    # The mocked suite failed its re-run: a real session wrote a real test, red on 41.
    files = redis_store.unit_files(PID, "mocked").files
    assert b"patch(" not in files["tests/test_unit.py"]
    assert b'"ok": false' in files["runs/run-2-1/result.json"]
    assert (project / "units/mocked/code/unit.py").read_text().endswith("return 42\n")
    # The tester's own failure went to the tester, with model turns of its own.
    assert attempts_logged(redis_store, "selfcheck") == [1]
    tries = [(r.tester_try, r.tokens > 0) for r in steps_of(redis_store, PID, ["selfcheck"])[
        "selfcheck"] if r.role == "tester"]
    assert tries == [(1, True), (2, True)]
    # open -> fixing (by the loop, for attempt 2) -> fixed (by the green run).
    [bug] = BugLedger(redis_store.sink(PID, "bugs")).list(unit_id="fixing")
    assert [(t.to, t.by) for t in bug.history] == [("fixing", "loop"), ("fixed", "tester")]
    # The outage waited, then resumed with a real call; the longer one blocked the unit.
    assert "loop_wait" in kinds(redis_store, "outage") and rows["outage"].last_error is None
    assert (rows["down"].blocked_reason or "").startswith("model unavailable: ")
    assert "blocked: down: model unavailable" in out
    # The step that raised was retried, then blocked its unit with the error.
    assert (rows["broken"].blocked_reason or "").startswith("infrastructure: JSONDecodeError")
    assert kinds(redis_store, "broken").count("loop_retry_step") == 2


@pytest.mark.timeout(600)
def test_the_next_run_resumes_units_blocked_by_the_model_or_the_infrastructure(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    down = [UnitPlan("down", coder_faults={1: {"kind": "overloaded", "times": 10**6}}),
            UnitPlan("needs-down", ["down"]), UnitPlan("broken")]
    project = build(tmp_path / "p", down)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(down)))
    checkpoint = redis_store.keys(PID).session("coder", "broken")
    redis_store.client.set(checkpoint, b"{oops")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_", "ANTHROPIC_"))}
    env |= {**SETTINGS, "DEVLOOP_MODEL_WAIT_TOTAL_S": "5", "DEVLOOP_REDIS_URL": redis_server.url,
            "COLUMNS": "200", "DEVLOOP_VIEWS_DIR": os.environ["DEVLOOP_VIEWS_DIR"],
            "DEVLOOP_TEST_RUN": os.environ["DEVLOOP_TEST_RUN"]}

    def run() -> subprocess.CompletedProcess[str]:
        proc = subprocess.Popen([DEVLOOP, "run", str(project), "--llm", "stub", "--workers", "2"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(timeout=240)
        finally:
            kill_tree(proc.pid)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    first = run()
    assert first.returncode == 1, first.stdout[-4000:] + first.stderr
    states = {u: redis_store.get_state(PID, u) for u in ("down", "needs-down", "broken")}
    assert {u: (s.status, s.attempt) for u, s in states.items()} == {
        "down": ("blocked", 1), "needs-down": ("blocked_upstream", 0), "broken": ("blocked", 1)}
    assert (states["down"].blocked_reason or "").startswith("model unavailable: ")
    assert (states["broken"].blocked_reason or "").startswith("infrastructure: JSONDecodeError")

    # The model answers again and the unreadable checkpoint is gone: nothing else changes.
    (project / "stub.yaml").write_text(yaml.safe_dump(script([UnitPlan(p.id, p.deps)
                                                              for p in down])))
    redis_store.client.delete(checkpoint)
    again = run()
    assert again.returncode == 0, again.stdout[-4000:] + again.stderr
    final = {u: redis_store.get_state(PID, u) for u in ("down", "needs-down", "broken")}
    # Each blocked unit went on with the same attempt: neither block counted as its code's.
    assert {u: (s.status, s.attempt) for u, s in final.items()} == {
        "down": ("passed", 1), "needs-down": ("passed", 1), "broken": ("passed", 1)}
    assert attempts_logged(redis_store, "down") == [1]
    assert attempts_logged(redis_store, "broken") == [1]
