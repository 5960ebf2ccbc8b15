"""The fleet with real Celery workers on a real Redis: parallel units, crash safety, blocking."""

from __future__ import annotations

from pathlib import Path

from devloop.fleet.records import steps_of
from devloop.ledgers import BugLedger, parse_coder_log
from devloop.llm.stub import StubServer
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.fleet import fleet
from tests.leftovers import views_of_killed_processes
from tests.workers.runproc import RunProcess, clean_env, kill_worker


def coder_log(store: RedisStore, pid: str, unit: str) -> list[int]:
    raw = store.unit_files(pid, unit).files.get("coder.log", b"").decode()
    return [d.attempt for d in parse_coder_log(raw)]


def test_layered_project_passes_and_releases_in_dependency_order(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    plans = [UnitPlan("a"), UnitPlan("b"), UnitPlan("c", ["a", "b"]), UnitPlan("d", ["c"])]
    project = build(tmp_path / "p", plans)
    with fleet(redis_store, redis_server.celery_url, project, script(plans)) as f:
        final = f.wait()
    assert final.all_passed
    assert all(r.attempt == 1 for r in final.units)
    # Each dependent's first step started only after every unit it depends on was decided
    # passed (the step records' own clocks, not when messages were sent).
    steps = steps_of(redis_store, f.pid, list("abcd"))
    first_start = {u: min(r.started_at for r in steps[u] if r.role == "coder") for u in "abcd"}
    passed_at = {u: next(r.ended_at for r in steps[u]
                         if r.role == "decide" and r.status == "pass") for u in "abcd"}
    for unit, deps in {"c": ["a", "b"], "d": ["c"]}.items():
        for dep in deps:
            assert first_start[unit] >= passed_at[dep], (unit, dep)


def test_a_worker_killed_mid_session_still_completes_the_unit_once(tmp_path: Path) -> None:
    # Through `devloop run` (its supervisor and its reconciler, not a loop of the test's),
    # with the model a stub this test runs, so it can see every request.
    plans = [UnitPlan("slow", coder_latency_ms={2: 4000})]
    project = build(tmp_path / "p", plans)
    with StubServer(script(plans)) as stub, views_of_killed_processes():
        env = clean_env(ANTHROPIC_BASE_URL=stub.base_url, ANTHROPIC_API_KEY="test",
                        DEVLOOP_LEASE_TTL_S="6", DEVLOOP_RECONCILE_GRACE_S="5")
        run = RunProcess(project, workers=1, env=env, llm="anthropic").start()
        try:
            run.wait_for("coder turn 2", lambda: [
                r for r in stub.requests if r.session_key.startswith("coder") and r.turn == 2
            ])
            [worker] = run.workers_now()
            kill_worker(worker)  # mid-turn 2 (the stub is still sleeping on it)
            assert run.wait(300) == 0, run.output()
        finally:
            run.close()
        turns = [r.turn for r in stub.requests
                 if r.session_key == "coder.c-test.p-fleet.slow" and r.status == 200]
    log = (project / "units/slow/coder.log").read_text()
    assert [d.attempt for d in parse_coder_log(log)] == [1]
    assert turns.count(1) == 1  # the answered turn before the kill was not asked again
    assert sorted(set(turns)) == [1, 2, 3]
    assert not (project / "bugs.ndjson").exists() or not (project / "bugs.ndjson").read_text()


def test_a_task_longer_than_the_visibility_timeout_never_runs_twice_at_once(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    plans = [UnitPlan("long", coder_latency_ms={1: 7000})]
    project = build(tmp_path / "p", plans)
    # The lease must outlive heartbeat pauses on a loaded machine; only redelivery is fast.
    env = {"DEVLOOP_LEASE_TTL_S": "20", "DEVLOOP_VISIBILITY_TIMEOUT_S": "2",
           "DEVLOOP_TASK_TIME_LIMIT_S": "60"}
    with fleet(redis_store, redis_server.celery_url, project, script(plans), workers=2,
               settings_env=env) as f:
        final = f.wait(timeout_s=120)
    assert final.all_passed
    coder_turns = [t for _, t in f.requests("coder.c-test.p-fleet.long")]
    assert coder_turns == [1, 2, 3]  # each model turn once: no second copy ran the session
    assert coder_log(redis_store, f.pid, "long") == [1]


def test_a_unit_failing_the_same_way_is_blocked_and_its_dependents_wait(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    plans = [UnitPlan("bad", bad=True), UnitPlan("after", ["bad"]), UnitPlan("good")]
    project = build(tmp_path / "p", plans)
    with fleet(redis_store, redis_server.celery_url, project, script(plans)) as f:
        final = f.wait(timeout_s=180)
    rows = {r.unit_id: r for r in final.units}
    assert (rows["bad"].status, rows["bad"].attempt) == ("blocked", 3)
    assert rows["after"].status == "blocked_upstream"
    assert rows["good"].status == "passed"
    assert coder_log(redis_store, f.pid, "bad") == [1, 2, 3]
    bugs = BugLedger(redis_store.sink(f.pid, "bugs")).list(unit_id="bad")
    assert len(bugs) == 1 and bugs[0].status == "open"  # one bug, reused by every red run
    hint = rows["bad"].last_hint or ""
    # The human-readable hint names what came back, what was expected and the assertion.
    assert "got 41 where 42 was expected" in hint and "`assert value() == 42`" in hint


def test_a_shared_redis_restarted_mid_run_the_run_completes(tmp_path: Path) -> None:
    # A Redis the run did not start (DEVLOOP_REDIS_URL) goes away and comes back from its
    # AOF: `devloop run` waits for it and its reconciler re-sends what the outage cancelled.
    plans = [UnitPlan("one", coder_latency_ms={2: 1500}), UnitPlan("two", ["one"])]
    project = build(tmp_path / "p", plans)
    with RedisServer(tmp_path / "aof-redis", appendonly=True) as server, \
            StubServer(script(plans)) as stub:
        env = clean_env(DEVLOOP_REDIS_URL=server.celery_url, ANTHROPIC_BASE_URL=stub.base_url,
                        ANTHROPIC_API_KEY="test", DEVLOOP_LEASE_TTL_S="6",
                        DEVLOOP_RECONCILE_GRACE_S="5")
        run = RunProcess(project, workers=2, env=env, llm="anthropic").start()
        try:
            run.wait_for("coder turn 2 of one", lambda: [r for r in stub.requests if r.turn == 2])
            server.restart()
            assert run.wait(300) == 0, run.output()
        finally:
            run.close()
        store = RedisStore(server.client())
        assert coder_log(store, "p-fleet", "one") == [1]
        assert coder_log(store, "p-fleet", "two") == [1]


def test_a_unit_whose_task_was_lost_is_re_sent_by_the_reconcile_in_another_unit_s_decide(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    plans = [UnitPlan("lost"), UnitPlan("other")]
    project = build(tmp_path / "p", plans)
    env = {"DEVLOOP_RECONCILE_GRACE_S": "1"}
    with fleet(redis_store, redis_server.celery_url, project, script(plans), workers=0,
               settings_env=env) as f:
        # The broker loses one of the two queued tasks, as a broker restart without its AOF
        # would; nothing else (no `devloop run`, no --repair) is there to re-send it.
        queued = redis_store.client.lrange("coder", 0, -1)
        [gone] = [m for m in queued if f"{f.pid}:lost:coder:1".encode() in m]
        assert redis_store.client.lrem("coder", 1, gone) == 1
        f.add_worker()
        final = f.wait(timeout_s=180)
    assert final.all_passed
    assert coder_log(redis_store, f.pid, "lost") == [1]
    assert coder_log(redis_store, f.pid, "other") == [1]
