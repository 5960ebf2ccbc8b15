"""The tester's zero-token re-run: no model call, but the static self-checks still hold."""

from __future__ import annotations

import json
from pathlib import Path

from devloop.core.config import Settings
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles.coder import run_coder
from devloop.roles.runtime import RoleRequest
from devloop.roles.tester import run_tester
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script

PID, UNIT = "p-fleet", "u"


def request_for(attempt: int, tester_try: int = 1) -> RoleRequest:
    mode = "test" if (attempt, tester_try) == (1, 1) else "retry"
    return RoleRequest(PID, UNIT, "tester", mode, attempt, run_id=f"run-{attempt}-{tester_try}",
                       tester_try=tester_try)


def test_a_suite_that_mocks_the_code_under_test_fails_its_rerun_and_gets_a_session(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    # value() returns 41 throughout; the tester's sessions: a real test, then a try that
    # leaves a suite mocking value() (its self-check fails), then a real test again.
    plans = [UnitPlan(UNIT, bad=True, tester=["proper", "mock", "proper"])]
    redis_store.import_project(load_project(build(tmp_path / "p", plans)))
    with StubServer(script(plans), record_bodies=True) as stub:
        llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
        run_coder(redis_store, settings, llm, RoleRequest(PID, UNIT, "coder", "implement", 1))
        run, first = run_tester(redis_store, settings, llm, request_for(1))
        assert run.session and run.session.status == "completed" and not first.ok

        # Unchanged since that checked session: re-run with no model call, still red.
        asked = len(stub.requests)
        run, rerun = run_tester(redis_store, settings, llm, request_for(2))
        assert run.session is None and rerun.tokens_used == 0 and len(stub.requests) == asked
        assert not rerun.ok and rerun.summary.failed == 1

        # A try whose self-check failed leaves the mock behind (committed, as sessions do).
        run, mocked = run_tester(redis_store, settings, llm, request_for(2, tester_try=2))
        assert run.session and run.session.terminal_reason == "validation_failed"
        assert mocked.ok is False and mocked.summary.passed == 1  # green only by the mock
        files = redis_store.unit_files(PID, UNIT).files
        assert b'patch("unit.value"' in files["tests/test_unit.py"]

        asked = len(stub.requests)
        run, again = run_tester(redis_store, settings, llm, request_for(3))
        assert run.session is not None and again.tokens_used > 0  # a real session, not green
        assert not again.ok and again.summary.failed == 1
        task = stub.requests[asked].body["messages"][-1]["content"]
        said = json.dumps(task)
        assert "mock the module under test" in said
        assert "changed since the last tester session whose self-check passed" in said


def test_a_second_session_on_an_unchanged_folder_reports_the_run_it_reused_never_a_crash(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    # `devloop session run --role tester` twice: the second asks for run-1-2, but the
    # session of attempt 1 has finished, so no model call is made and nothing runs.
    plans = [UnitPlan(UNIT, bad=True, tester=["proper"])]
    redis_store.import_project(load_project(build(tmp_path / "p", plans)))
    with StubServer(script(plans), record_bodies=True) as stub:
        llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
        run_coder(redis_store, settings, llm, RoleRequest(PID, UNIT, "coder", "implement", 1))
        _, first = run_tester(redis_store, settings, llm, request_for(1))
        assert first.run_id == "run-1-1" and not first.crashed and first.reused_run is None
        asked = len(stub.requests)
        again = RoleRequest(PID, UNIT, "tester", "test", 1, run_id="run-1-2")
        run, second = run_tester(redis_store, settings, llm, again)
    assert len(stub.requests) == asked and second.tokens_used == 0  # nothing was asked
    # Invariant: a re-run with nothing to do reports what it reused, never `crashed`.
    assert not second.crashed and second.reused_run == "run-1-1"
    assert second.run_id == "run-1-1"
    assert second.result_ref == f"units/{UNIT}/runs/run-1-1/result.json"
    assert second.summary == first.summary and second.ok == first.ok
    assert "runs/run-1-2/result.json" not in redis_store.unit_files(PID, UNIT).files
