"""Tiny python-stack projects with scripted sessions, for fleet tests.

Every unit exports the same contract, so one hash serves all. Each unit's coder follows a
script of attempts ("good" writes 42, "bad" writes 41, "unbridged" writes 42 with a
contract.json whose version is not its hash, so its self-check fails; "unlogged" writes 42
but no coder.log entry, is asked for it once, and the runtime logs the attempt's facts);
its tester, a script of sessions ("proper"
tests value(), "mock" tests a mock of it and fails its self-check). A "bad" unit keeps
writing the same wrong value, so its tests fail the same way every attempt.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devloop.core.contracts import hash_contract

CONTRACT = {"exports": {"module": {"code/unit.py": {"value()": "-> 42"}}}, "consumes": []}
TESTS = "from unit import value\n\n\ndef test_value_returns_42():\n    assert value() == 42\n"
# Passes whatever code/unit.py returns: the self-check must refuse it.
MOCK_TESTS = (
    "from unittest.mock import patch\n\nimport unit\n\n\n"
    "def test_value_returns_42():\n"
    '    with patch("unit.value", return_value=42):\n'
    "        assert unit.value() == 42\n"
)
# Asks for pytest-mock's fixture, which the sandbox's venv lacks: the tests' own fault.
MOCKER_TESTS = ("from unit import value\n\n\n"
                "def test_value_returns_42(mocker):\n    assert value() == 42\n")
ATTEMPTS = 5
# A version written by hand, not hash_contract's: contract_bridge refuses it.
UNHASHED = "sha256:0000000000000000"


@dataclass
class UnitPlan:
    """One unit: its dependencies, how its coder and tester behave, slow or failing turns."""

    id: str
    deps: list[str] = field(default_factory=list)
    bad: bool = False  # shorthand for coder=["bad"]
    coder_latency_ms: dict[int, int] = field(default_factory=dict)  # turn -> latency
    # per attempt: good | good2 | bad | bad2 | unbridged | unlogged
    coder: list[str] = field(default_factory=list)
    tester: list[str] = field(default_factory=list)  # per session: proper | mock | mocker
    coder_faults: dict[int, dict[str, Any]] = field(default_factory=dict)  # turn -> stub fault
    seeded_tests: str | None = None  # tests/test_unit.py in the folder before the run
    review: str | None = None  # units.json's "review" for this unit ("required" | "none")
    tests_text: str | None = None  # what a proper tester session writes (default: TESTS)
    attempts: int = ATTEMPTS  # how many coder attempts are scripted

    def coder_attempts(self) -> list[str]:
        """`attempts` attempts: the plan's, then its last one again."""
        plan = self.coder or (["bad"] if self.bad else ["good"])
        return (plan + [plan[-1]] * self.attempts)[: self.attempts]

    def tester_sessions(self) -> list[str]:
        """The plan's sessions, then proper ones for any later session."""
        return (self.tester or []) + ["proper"] * max(ATTEMPTS, self.attempts)


def _turn(*blocks: Any, latency: int = 0) -> dict[str, Any]:
    content = [{"text": b} if isinstance(b, str) else {"tool_use": {"name": b[0], "input": b[1]}}
               for b in blocks]
    turn: dict[str, Any] = {"content": content}
    if latency:
        turn["latency_ms"] = latency
    return turn


def _coder_session(plan: UnitPlan, attempt: int, kind: str) -> list[dict[str, Any]]:
    """write, log, finish; an unbridged attempt finishes three times (the first claim and
    two hand-backs), an unlogged one twice (the claim and once after the reminder)."""
    version = UNHASHED if kind == "unbridged" else hash_contract(CONTRACT)
    contract = json.dumps({"unit_id": plan.id, "version": version, **CONTRACT}, indent=2)
    # good2: 42 by other code; bad2: wrong another way (a failure of its own)
    value = {"bad": "41", "bad2": "43", "good2": "40 + 2"}.get(kind, "42")
    code = f"def value():\n    return {value}\n"
    decision: dict[str, Any] = {"this_fix": f"value() returns the constant (try {attempt})",
                                "rationale": "the contract asks for 42",
                                "changed_files": ["code/unit.py"]}
    if attempt > 1:
        decision.update(last_failure="test_value_returns_42 failed",
                        last_cause="value() returned the wrong constant")
    items = [{"id": "step-001", "title": "write code/unit.py"}]
    if attempt > 1:  # a retry states its workflow (the tests exist by then)
        items += [
            {"id": "step-002", "title": "BASELINE: the runtime's run before the first edit"},
            {"id": "step-003", "title": "VERIFY: verify_tests after the change"},
            {"id": "step-004", "title": "DONE WHEN: the failing test passes, nothing regresses"},
        ]
    write = _turn(
        ("write_todolist", {"items": items}),
        ("Write", {"path": "code/unit.py", "content": code}),
        ("Write", {"path": "contract.json", "content": contract}),
    )
    done = [("update_todo_item", {"id": i["id"], "status": "done"}) for i in items]
    event = ("timeline_append", {"kind": "code_patched" if attempt > 1 else "unit_coded",
                                 "summary": f"{plan.id}: value()"})
    finish = _turn(f"{plan.id}: code/unit.py written.")
    if kind == "unlogged":
        return [write, _turn(event, *done), finish, finish]
    if kind == "unbridged":
        return [write, _turn(("append_coder_log", {"decision": decision}), event, *done),
                finish, finish, finish]
    return [write, _turn(("append_coder_log", {"decision": decision}), event, *done), finish]


def coder_turns(plan: UnitPlan) -> dict[int, Any]:
    """Every attempt's turns, numbered as the one conversation the coder keeps."""
    turns: list[dict[str, Any]] = []
    for attempt, kind in enumerate(plan.coder_attempts(), start=1):
        turns += _coder_session(plan, attempt, kind)
    numbered = {n: dict(turn) for n, turn in enumerate(turns, start=1)}
    for turn, latency in plan.coder_latency_ms.items():
        numbered[turn]["latency_ms"] = latency
    for turn, fault in plan.coder_faults.items():
        numbered[turn]["fault"] = fault
    return numbered


def _tester_session(kind: str, tests: str = TESTS) -> list[dict[str, Any]]:
    """Write one test, run it, close the todolist, finish (a mock's finish fails, thrice)."""
    write = _turn(
        ("write_todolist", {"items": [{"id": "step-001", "title": "test value()"}]}),
        ("Write", {"path": "tests/test_unit.py",
                   "content": {"mock": MOCK_TESTS, "mocker": MOCKER_TESTS}.get(kind, tests)}),
    )
    turns = [write, _turn(("run_tests", {})),
             _turn(("update_todo_item", {"id": "step-001", "status": "done"}),
                   ("timeline_append", {"kind": "unit_tested", "summary": "one test"}),
                   ("timeline_append", {"kind": "test_passed", "summary": "as run_tests said"})),
             _turn("One test written and run.")]
    return (turns + [_turn("Done.")] * 2) if kind == "mock" else turns


def tester_turns(plan: UnitPlan | None = None) -> dict[int, Any]:
    """Every tester session's turns, numbered as the one conversation the tester keeps."""
    sessions = plan.tester_sessions() if plan else ["proper"]
    tests = (plan.tests_text if plan else None) or TESTS
    turns = [turn for kind in sessions for turn in _tester_session(kind, tests)]
    return dict(enumerate(turns, start=1))


def build(root: Path, plans: list[UnitPlan], pid: str = "p-fleet",
          review: str | None = None) -> Path:
    """Write the project folder (units.json, the SDD, any seeded tests)."""
    root.mkdir(parents=True, exist_ok=True)
    version = hash_contract(CONTRACT)
    units: dict[str, Any] = {"company_id": "c-test", "project_id": pid, "stack": "python",
                             "units": [
        {"id": p.id, "kind": "lib", "depends_on": p.deps, "contract_hash": version,
         **({"review": p.review} if p.review else {})}
        for p in plans
    ]}
    if review:
        units["review"] = review
    (root / "units.json").write_text(json.dumps(units, indent=2))
    sections = "".join(
        f'<section data-unit-id="{p.id}"><pre data-contract>'
        f"{html.escape(json.dumps(CONTRACT))}</pre>"
        "<ul data-acceptance><li>value() returns 42</li></ul></section>\n"
        for p in plans
    )
    (root / "sdd/mvcp").mkdir(parents=True, exist_ok=True)
    (root / "sdd/mvcp/units.html").write_text(f"<html><body>\n{sections}</body></html>\n")
    for plan in plans:
        if plan.seeded_tests is not None:
            tests = root / "units" / plan.id / "tests"
            tests.mkdir(parents=True, exist_ok=True)
            (tests / "test_unit.py").write_text(plan.seeded_tests)
    return root


def script(plans: list[UnitPlan]) -> dict[str, Any]:
    """The stub script for every unit of the plans."""
    sessions: dict[str, Any] = {}
    for plan in plans:
        sessions[f"coder.*.{plan.id}"] = {"turns": coder_turns(plan)}
        sessions[f"tester.*.{plan.id}"] = {"turns": tester_turns(plan)}
    sessions["*.reassess.*"] = {"default": _turn("1. Re-read the spec.")}
    return {"sessions": sessions, "default": _turn("Nothing scripted.")}
