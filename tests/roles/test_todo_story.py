"""The specification's todo-be story, end to end: real SDK client, stub turns, real vitest."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.ledgers import BugLedger, parse_coder_log
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles.coder import run_coder
from devloop.roles.runtime import RoleRequest
from devloop.roles.tester import run_tester
from devloop.store import RedisStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "todo"


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer(EXAMPLE / "stub.yaml", record_bodies=True) as server:
        yield server


def test_todo_be_goes_red_then_green_with_a_reflected_fix(
    redis_store: RedisStore,
    settings: Settings,
    todo_project: Path,
    stub: StubServer,
    node_toolchain_dir: Path,
) -> None:
    store = redis_store
    store.import_project(load_project(todo_project))
    llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
    pid, unit = "p-todo", "todo-be"

    run, coder = run_coder(store, settings, llm, RoleRequest(pid, unit, "coder", "implement", 1))
    assert run.session and run.session.status == "completed", run.session
    assert coder.ok and coder.contract_match_sdd and coder.sandbox_violations == []
    assert coder.files_written == [
        "code/server.js",
        "code/service.js",
        "coder.log",
        "contract.json",
    ]

    run, tester = run_tester(
        store, settings, llm, RoleRequest(pid, unit, "tester", "test", 1, run_id="run-1-1")
    )
    assert run.session and run.session.status == "completed", run.session
    assert not tester.ok and not tester.crashed
    assert (tester.summary.total, tester.summary.failed) == (6, 1)
    [failure] = tester.failures
    assert failure.test.endswith('A missing title returns 400 with error "title_required"')
    assert (failure.expected, failure.got) == (400, 500)
    assert "length" in failure.hint and "title" in failure.hint
    assert tester.bugs_opened == [failure.bug_id]
    assert (tester.acceptance_coverage, tester.contract_coverage) == (1.0, 1.0)

    run, coder = run_coder(store, settings, llm, RoleRequest(pid, unit, "coder", "retry", 2))
    assert coder.ok, run.session
    # BASELINE before the patch (in the retry's first message), VERIFY after it, both
    # read-only: nothing of them is committed.
    retry = [r for r in stub.requests if r.session_key == "coder.c-demo.p-todo.todo-be"]
    opening = retry[-1].body["messages"]
    starts = [m for m in opening if m["role"] == "user" and "## Baseline" in json.dumps(m)]
    assert starts and "5 of 6 passed" in json.dumps(starts[0])
    assert '\\"done_when_met\\": true' in json.dumps(opening)
    assert not [p for p in store.unit_files(pid, unit).files if p.startswith("runs/verify")]
    assert coder.decision.last_failure and "500" in coder.decision.last_failure
    log = store.unit_files(pid, unit).files["coder.log"].decode()
    entries = parse_coder_log(log)
    assert [e.attempt for e in entries] == [1, 2]
    assert entries[1].last_cause and "undefined" in entries[1].last_cause
    assert run.history and run.history[0].tester_said[0]["test"] == failure.test

    requests_before = len(stub.requests)
    run, tester = run_tester(
        store, settings, llm, RoleRequest(pid, unit, "tester", "retry", 2, run_id="run-2-1")
    )
    assert run.session is None and tester.tokens_used == 0
    assert len(stub.requests) == requests_before  # the re-run never called the model
    assert tester.ok and tester.summary.passed == 6
    assert [(m.id, m.to) for m in tester.bugs_transitioned] == [(failure.bug_id, "fixed")]
    bug = BugLedger(store.sink(pid, "bugs")).get(failure.bug_id or "")
    assert bug and bug.status == "fixed" and bug.history[-1].fix_refs == ["run-2-1"]
    files = store.unit_files(pid, unit).files
    assert b'"ok": true' in files["runs/run-2-1/result.json"]


def test_todo_fe_passes_first_time_against_the_upstream_contract(
    redis_store: RedisStore,
    settings: Settings,
    todo_project: Path,
    stub: StubServer,
    node_toolchain_dir: Path,
) -> None:
    store = redis_store
    store.import_project(load_project(todo_project))
    llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
    _, coder = run_coder(
        store, settings, llm, RoleRequest("p-todo", "todo-fe", "coder", "implement", 1)
    )
    assert coder.ok and coder.contract_match_sdd
    run, tester = run_tester(
        store,
        settings,
        llm,
        RoleRequest("p-todo", "todo-fe", "tester", "test", 1, run_id="run-1-1"),
    )
    assert tester.ok, (run.session, tester.failures)
    assert tester.summary.passed == 3
