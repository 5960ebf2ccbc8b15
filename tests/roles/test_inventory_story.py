"""The todo story on the python stack: examples/inventory through the roles, in DAG order.

Real parts throughout: the anthropic SDK against the stub server serving
examples/inventory/stub.yaml, Redis, bubblewrap, and real pytest in the python test venv.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devloop.core import dag
from devloop.core.config import Settings
from devloop.core.models import TesterOutput
from devloop.ledgers import BugLedger, Timeline, parse_coder_log
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles.coder import run_coder
from devloop.roles.runtime import RoleRequest
from devloop.roles.tester import run_tester
from devloop.store import RedisStore
from tests.conftest import EXAMPLES

PID = "p-inventory"
MODULES = {"stock-db": "stock_db", "pricing": "pricing", "orders": "orders", "reports": "reports"}
RETRY_UNIT = "orders"
FAILING_TEST = (
    "tests/test_orders.py::test_an_order_without_a_discount_takes_stock_and_charges_the_line_total"
)


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer(EXAMPLES / "inventory" / "stub.yaml", record_bodies=True) as server:
        yield server


def tool_errors(stub: StubServer) -> list[str]:
    """Every tool result the scripted sessions got back as an error (the script must not err)."""
    seen: dict[str, str] = {}
    for request in stub.requests:
        for message in request.body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_result" and block.get("is_error"):
                    seen[block["tool_use_id"]] = f"{request.session_key}: {block['content']}"
    return list(seen.values())


def code_then_test(
    store: RedisStore, settings: Settings, llm: AnthropicProvider, unit: str
) -> TesterOutput:
    """Attempt 1 of a unit: the coder implements, the tester writes and runs tests."""
    run, coder = run_coder(store, settings, llm, RoleRequest(PID, unit, "coder", "implement", 1))
    assert run.session and run.session.status == "completed", run.session
    assert coder.ok and coder.contract_match_sdd and coder.sandbox_violations == []
    assert coder.files_written == [f"code/{MODULES[unit]}.py", "coder.log", "contract.json"]
    entry = store.project_record(PID).units.unit(unit)
    assert entry and coder.contract_hash == entry.contract_hash
    request = RoleRequest(PID, unit, "tester", "test", 1, run_id="run-1-1")
    run, tester = run_tester(store, settings, llm, request)
    assert run.session and run.session.status == "completed", run.session.model_dump_json(
        include={"status", "terminal_reason", "self_check_failures"}) if run.session else None
    # A crashed run says why in its result.json (not in the output's summary of it).
    assert not tester.crashed, store.unit_file(PID, unit, f"runs/{request.run_id}/result.json")
    assert tester.tokens_used > 0
    assert (tester.acceptance_coverage, tester.contract_coverage) == (1.0, 1.0)
    return tester


def test_the_inventory_project_goes_green_in_dependency_order_with_one_reflected_retry(
    redis_store: RedisStore,
    settings: Settings,
    inventory_project: Path,
    stub: StubServer,
    python_toolchain_dir: Path,
) -> None:
    store = redis_store
    project = load_project(inventory_project)
    store.import_project(project)
    llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
    graph = project.graph()
    passed: list[str] = []
    started: list[str] = []
    results: dict[str, Any] = {}

    while ready := dag.ready_units(graph, passed, started):
        unit = ready[0]
        started.append(unit)
        tester = code_then_test(store, settings, llm, unit)
        if unit == RETRY_UNIT:
            results["red"] = tester
            tester = retry_until_green(store, settings, llm, stub, tester)
        assert tester.ok, (unit, tester.failures)
        passed.append(unit)
        results[unit] = tester

    # Dependents waited for their prerequisites: reports only after orders went green.
    assert passed == ["pricing", "stock-db", "orders", "reports"]
    assert {u: results[u].summary.passed for u in passed} == {
        "pricing": 5,
        "stock-db": 5,
        "orders": 5,
        "reports": 3,
    }
    assert tool_errors(stub) == []
    # Only orders opened a bug, and its run-2-1 fixed it.
    bugs = BugLedger(store.sink(PID, "bugs")).list()
    assert [(b.unit_id, b.test_name, b.status) for b in bugs] == [
        (RETRY_UNIT, FAILING_TEST, "fixed")
    ]
    assert bugs[0].history[-1].fix_refs == ["run-2-1"]
    kinds = [(e.unit_id, e.kind) for e in Timeline(store.sink(PID, "timeline")).events()]
    assert (RETRY_UNIT, "code_patched") in kinds and ("reports", "test_passed") in kinds


def retry_until_green(
    store: RedisStore,
    settings: Settings,
    llm: AnthropicProvider,
    stub: StubServer,
    red: TesterOutput,
) -> TesterOutput:
    """orders: attempt 1 is red on a KeyError; the coder reflects and fixes; the re-run is green."""
    assert not red.ok and (red.summary.total, red.summary.failed) == (5, 1)
    [failure] = red.failures
    assert failure.test == FAILING_TEST
    assert "KeyError: 'discount'" in failure.stack
    assert "`request['discount']` raised KeyError at code/orders.py:55" in failure.hint
    assert ".get('discount')" in failure.hint
    assert red.bugs_opened == [failure.bug_id]
    bug = BugLedger(store.sink(PID, "bugs")).get(failure.bug_id or "")
    assert bug and bug.status == "open" and bug.test_name == FAILING_TEST
    assert bug.title == f"{FAILING_TEST}: KeyError: 'discount'"  # the error, not "expected None"

    request = RoleRequest(PID, RETRY_UNIT, "coder", "retry", 2)
    run, coder = run_coder(store, settings, llm, request)
    assert run.session and run.session.status == "completed", run.session
    assert coder.ok and coder.files_written == ["code/orders.py", "coder.log"]
    # The retry continued attempt 1's conversation: the stub served turns 8 to 12.
    turns = [r.turn for r in stub.requests if r.session_key.endswith(".orders")]
    assert turns[-5:] == [8, 9, 10, 11, 12] and run.session.turns == 5
    assert run.history and run.history[0].tester_said[0]["hint"] == failure.hint
    files = store.unit_files(PID, RETRY_UNIT).files
    entries = parse_coder_log(files["coder.log"].decode())
    assert [e.attempt for e in entries] == [1, 2]
    reflection = entries[1]
    assert reflection.last_failure and "KeyError: 'discount'" in reflection.last_failure
    assert reflection.last_cause and 'request["discount"]' in reflection.last_cause
    assert reflection.this_fix.startswith('place() reads the discount with request.get("discount")')
    assert coder.decision.last_failure == reflection.last_failure
    assert b'request.get("discount")' in files["code/orders.py"]

    requests_before = len(stub.requests)
    request = RoleRequest(PID, RETRY_UNIT, "tester", "retry", 2, run_id="run-2-1")
    run, green = run_tester(store, settings, llm, request)
    assert run.session is None and green.tokens_used == 0
    assert len(stub.requests) == requests_before  # the re-run never called the model
    assert [(m.id, m.from_, m.to) for m in green.bugs_transitioned] == [
        (failure.bug_id, "open", "fixed")
    ]
    result = json.loads(store.unit_files(PID, RETRY_UNIT).files["runs/run-2-1/result.json"])
    assert (result["ok"], result["attempt"], result["summary"]["passed"]) == (True, 2, 5)
    return green
