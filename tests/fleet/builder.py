"""Tiny python-stack projects with scripted sessions, for fleet tests.

Every unit exports the same contract, so one hash serves all; a "bad" unit's coder keeps
writing the same wrong value, so its tests fail the same way every attempt.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devloop.contracts import hash_contract

CONTRACT = {"exports": {"module": {"code/unit.py": {"value()": "-> 42"}}}, "consumes": []}
TESTS = "from unit import value\n\n\ndef test_value_returns_42():\n    assert value() == 42\n"
ATTEMPTS = 5


@dataclass
class UnitPlan:
    """One unit: its dependencies, whether its code is wrong, and slow turns to inject."""

    id: str
    deps: list[str] = field(default_factory=list)
    bad: bool = False
    coder_latency_ms: dict[int, int] = field(default_factory=dict)  # turn -> latency


def _turn(*blocks: Any, latency: int = 0) -> dict[str, Any]:
    content = [{"text": b} if isinstance(b, str) else {"tool_use": {"name": b[0], "input": b[1]}}
               for b in blocks]
    turn: dict[str, Any] = {"content": content}
    if latency:
        turn["latency_ms"] = latency
    return turn


def coder_turns(plan: UnitPlan) -> dict[int, Any]:
    """Three turns per attempt: write, log, finish; a retry logs its reflection."""
    version = hash_contract(CONTRACT)
    contract = json.dumps({"unit_id": plan.id, "version": version, **CONTRACT}, indent=2)
    code = f"def value():\n    return {41 if plan.bad else 42}\n"
    turns: dict[int, Any] = {}
    for attempt in range(1, ATTEMPTS + 1):
        first = 3 * attempt - 2
        decision: dict[str, Any] = {"this_fix": f"value() returns the constant (try {attempt})",
                                    "rationale": "the contract asks for 42",
                                    "changed_files": ["code/unit.py"]}
        if attempt > 1:
            decision.update(last_failure="test_value_returns_42 failed",
                            last_cause="value() returned the wrong constant")
        turns[first] = _turn(
            ("write_todolist", {"items": [{"id": "step-001", "title": "write code/unit.py"}]}),
            ("Write", {"path": "code/unit.py", "content": code}),
            ("Write", {"path": "contract.json", "content": contract}),
        )
        turns[first + 1] = _turn(
            ("append_coder_log", {"decision": decision}),
            ("update_todo_item", {"id": "step-001", "status": "done"}),
        )
        turns[first + 2] = _turn(f"{plan.id}: code/unit.py written.")
    for turn, latency in plan.coder_latency_ms.items():
        turns[turn]["latency_ms"] = latency
    return turns


def tester_turns() -> dict[int, Any]:
    """Write one test, run it, close the todolist, finish."""
    return {
        1: _turn(("write_todolist", {"items": [{"id": "step-001", "title": "test value()"}]}),
                 ("Write", {"path": "tests/test_unit.py", "content": TESTS})),
        2: _turn(("run_tests", {})),
        3: _turn(("update_todo_item", {"id": "step-001", "status": "done"})),
        4: _turn("One test written and run."),
    }


def build(root: Path, plans: list[UnitPlan], pid: str = "p-fleet") -> Path:
    """Write the project folder and its stub.yaml-equivalent script (returned as JSON file)."""
    root.mkdir(parents=True, exist_ok=True)
    version = hash_contract(CONTRACT)
    units = {"company_id": "c-test", "project_id": pid, "stack": "python", "units": [
        {"id": p.id, "kind": "lib", "depends_on": p.deps, "contract_hash": version}
        for p in plans
    ]}
    (root / "units.json").write_text(json.dumps(units, indent=2))
    sections = "".join(
        f'<section data-unit-id="{p.id}"><pre data-contract>'
        f"{html.escape(json.dumps(CONTRACT))}</pre>"
        "<ul data-acceptance><li>value() returns 42</li></ul></section>\n"
        for p in plans
    )
    (root / "sdd/mvcp").mkdir(parents=True, exist_ok=True)
    (root / "sdd/mvcp/units.html").write_text(f"<html><body>\n{sections}</body></html>\n")
    return root


def script(plans: list[UnitPlan]) -> dict[str, Any]:
    """The stub script for every unit of the plans."""
    sessions: dict[str, Any] = {}
    for plan in plans:
        sessions[f"coder.*.{plan.id}"] = {"turns": coder_turns(plan)}
        sessions[f"tester.*.{plan.id}"] = {"turns": tester_turns()}
    sessions["*.reassess.*"] = {"default": _turn("1. Re-read the spec.")}
    return {"sessions": sessions, "default": _turn("Nothing scripted.")}
