"""A coder retry of inventory's pricing, ready to script: attempt 1's code with two bugs in
line_total, the tester's four tests (two red), its run and bugs, and attempt 1's log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devloop.core.config import Settings
from devloop.core.models import CoderDecision, CoderOutput, Failure, RunResult, RunSummary
from devloop.ledgers import format_decision
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles.coder import run_coder
from devloop.roles.runtime import RoleRequest, RoleRun
from devloop.store import RedisStore
from tests.roles.test_self_checks import HANDBACK, call, contract_text

PID, UNIT = "p-inventory", "pricing"
KEY = f"coder.c-demo.{PID}.{UNIT}"


def pricing(line_total: str, discount: str = "total_cents - total_cents // 10") -> str:
    """code/pricing.py with the given bodies of line_total and apply_discount."""
    return f'''"""Prices in cents."""


class InvalidDiscount(ValueError):
    """An unknown discount code."""


def line_total(price_cents: int, qty: int) -> int:
    """price_cents times qty."""
    return {line_total}


def apply_discount(total_cents: int, code: str) -> int:
    """10% off with SAVE10, the discount rounded down."""
    if code != "SAVE10":
        raise InvalidDiscount(code)
    return {discount}
'''


BUGGY = pricing("price_cents + qty")  # adds: two tests red
FIXED = pricing("price_cents * qty")
HALF = pricing("price_cents if qty == 1 else price_cents + qty")  # one of the two fixed
BROKEN = pricing("price_cents * qty", "total_cents - total_cents // 100")  # a regression
TESTS = '''import pytest

from pricing import InvalidDiscount, apply_discount, line_total


def test_line_total_is_price_cents_times_qty():
    assert line_total(200, 3) == 600


def test_line_total_of_one_is_the_price():
    assert line_total(250, 1) == 250


def test_save10_takes_ten_percent_off_rounding_the_discount_down():
    assert apply_discount(999, "SAVE10") == 900


def test_an_unknown_discount_code_raises_invalid_discount():
    with pytest.raises(InvalidDiscount):
        apply_discount(100, "NOPE")
'''
T1 = "tests/test_pricing.py::test_line_total_is_price_cents_times_qty"
T2 = "tests/test_pricing.py::test_line_total_of_one_is_the_price"
T3 = "tests/test_pricing.py::test_save10_takes_ten_percent_off_rounding_the_discount_down"
WORKFLOW = [
    {"id": "step-001", "title": "BASELINE: 2 of 4 pass; the two line_total tests fail"},
    {"id": "step-002", "title": "VERIFY: verify_tests after each change"},
    {
        "id": "step-003",
        "title": "DONE WHEN: the failing tests pass and nothing that passed in the baseline fails",
    },
    {"id": "step-004", "title": "Patch line_total in code/pricing.py"},
]
REFLECTION = {
    "last_failure": f"{T1}: expected 600, got 203",
    "last_cause": "line_total added qty to price_cents instead of multiplying",
    "this_fix": "line_total in code/pricing.py returns price_cents * qty",
    "rationale": "the contract says price_cents times qty",
    "changed_files": ["code/pricing.py"],
}
DONE = {"content": [{"text": "Done: line_total multiplies."}]}


def plan() -> dict[str, Any]:
    return call("write_todolist", items=WORKFLOW)


def wrap_up() -> list[dict[str, Any]]:
    """Log the reflection, the timeline event, every item done."""
    return [
        call("append_coder_log", decision=REFLECTION),
        call("timeline_append", kind="code_patched", summary="line_total multiplies"),
        *[call("update_todo_item", id=i["id"], status="done") for i in WORKFLOW],
    ]


def write(code: str) -> dict[str, Any]:
    return call("Write", path="code/pricing.py", content=code)


def prepare_retry(project: Path) -> None:
    """The folder as attempt 1 left it (red on the two line_total tests)."""
    unit = project / "units" / UNIT
    (unit / "code").mkdir(parents=True)
    (unit / "code" / "pricing.py").write_text(BUGGY)
    (unit / "tests").mkdir()
    (unit / "tests" / "test_pricing.py").write_text(TESTS)
    (unit / "contract.json").write_text(contract_text(project, UNIT))
    decision = CoderDecision(
        attempt=1, this_fix="First pricing", rationale="as the SDD says", changed_files=[]
    )
    (unit / "coder.log").write_text(format_decision(decision))
    hint = "line_total adds qty to price_cents at code/pricing.py:12: multiply them"
    failures = [
        Failure(test=T1, expected=600, got=203, hint=hint, bug_id="bug-1"),
        Failure(test=T2, expected=250, got=251, hint=hint, bug_id="bug-2"),
    ]
    result = RunResult(
        run_id="run-1-1",
        unit_id=UNIT,
        attempt=1,
        ok=False,
        summary=RunSummary(total=4, passed=2, failed=2),
        failures=failures,
        next_action="retry_coder",
    )
    (unit / "runs" / "run-1-1").mkdir(parents=True)
    (unit / "runs" / "run-1-1" / "result.json").write_text(json.dumps(result.to_json_dict()))


@dataclass
class Retry:
    """A driven retry: what the role reported and what the stub was asked."""

    run: RoleRun
    output: CoderOutput
    stub: StubServer
    store: RedisStore
    handbacks: list[str] = field(default_factory=list)

    def requests(self, key: str = KEY) -> list[Any]:
        return [r for r in self.stub.requests if r.session_key == key]

    def tool_results(self) -> list[dict[str, Any]]:
        """Every tool result the model was sent, from the last request."""
        last = self.requests()[-1].body["messages"]
        return [
            b
            for m in last
            if m["role"] == "user"
            for b in m["content"]
            if b.get("type") == "tool_result"
        ]


@pytest.fixture
def retry(
    redis_store: RedisStore,
    settings: Settings,
    inventory_project: Path,
    python_toolchain_dir: Path,
) -> Iterator[Any]:
    """Script the attempt-2 coder session of pricing, turn by turn, and run it."""
    stubs: list[StubServer] = []

    def go(turns: list[list[dict[str, Any]]], reassess: str | None = None) -> Retry:
        prepare_retry(inventory_project)
        redis_store.import_project(load_project(inventory_project))
        sessions: dict[str, Any] = {
            KEY: {"turns": {n: {"content": t} for n, t in enumerate(turns, 1)}, "default": DONE}
        }
        if reassess is not None:
            sessions[f"{KEY}.reassess.*"] = {"default": {"content": [{"text": reassess}]}}
        stub = StubServer({"sessions": sessions}, record_bodies=True).start()
        stubs.append(stub)
        llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
        request = RoleRequest(PID, UNIT, "coder", "retry", 2, reflect_hint="multiply")
        run, output = run_coder(redis_store, settings, llm, request)
        texts = [
            b["text"]
            for r in stub.requests
            if r.session_key == KEY and r.body["messages"][-1]["role"] == "user"
            for b in r.body["messages"][-1]["content"]
            if b.get("type") == "text" and b["text"].startswith(HANDBACK)
        ]
        return Retry(run, output, stub, redis_store, texts)

    yield go
    for stub in stubs:
        stub.stop()
