"""Hand-offs that carry the facts (issue 29, item 1), and the green a re-run reached (item 4).

A played run showed the coder's note for the tester never reaching it, the tester's
conclusion about a crash never reaching the coder, and a crash raised from code/ going back
to the tester. Here one unit is carried through real steps (real Redis, real bubblewrap,
real pytest, the real client against the stub): its first code raises at import.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devloop.core.config import Settings
from devloop.fleet.records import steps_of
from devloop.fleet.status import project_status
from devloop.store import RedisStore
from tests.fleet.builder import CONTRACT, TESTS, UnitPlan, build
from tests.fleet.chain import chains

CRASHING = 'raise RuntimeError("settings not loaded")\n\n\ndef value():\n    return 42\n'
GOOD = "def value():\n    return 42\n"
CODER_NOTE = "For the tester: unit.py loads its settings at import; that may fail here."
TESTER_NOTE = "The crash is the code's: code/unit.py:1 raises RuntimeError at import."
WORKFLOW = [
    {"id": "step-001", "title": "BASELINE: the run crashed at import of code/unit.py"},
    {"id": "step-002", "title": "VERIFY: verify_tests after the change"},
    {"id": "step-003", "title": "DONE WHEN: the failing test passes, nothing regresses"},
]


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_use": {"name": name, "input": args}}


def turn(*blocks: Any) -> dict[str, Any]:
    return {"content": [{"text": b} if isinstance(b, str) else b for b in blocks]}


def coder_session(attempt: int, code: str, items: list[dict[str, str]]) -> list[Any]:
    """Plan, write the code and contract.json in one turn; log, event and the last item
    in the next; then the closing summary alone."""
    decision: dict[str, Any] = {"this_fix": f"code/unit.py value() returns 42 (try {attempt})",
                                "rationale": "the contract asks for 42",
                                "changed_files": ["code/unit.py"]}
    if attempt > 1:
        decision.update(last_failure="test_value_returns_42: the run crashed at import",
                        last_cause="code/unit.py raised RuntimeError at import, line 1")
    return [
        turn(call("write_todolist", items=items),
             call("Write", path="code/unit.py", content=code),
             call("hash_contract", contract=CONTRACT, write=True)),
        turn(call("syntax_check"), call("append_coder_log", decision=decision),
             call("timeline_append", kind="code_patched" if attempt > 1 else "unit_coded",
                  summary="value()"),
             *[call("update_todo_item", id=i["id"], status="done") for i in items]),
        turn(f"code/unit.py written. {CODER_NOTE}" if attempt == 1 else "value() fixed."),
    ]


def script() -> dict[str, Any]:
    first = [{"id": "step-004", "title": "write code/unit.py"}]
    coder = coder_session(1, CRASHING, first) + coder_session(2, GOOD, [*WORKFLOW, *first])
    tester = [
        turn(call("write_todolist", items=[{"id": "step-001", "title": "test value()"}]),
             call("Write", path="tests/test_unit.py", content=TESTS)),
        turn(call("run_tests")),
        turn(call("update_todo_item", id="step-001", status="done"),
             call("timeline_append", kind="unit_tested", summary="one test"),
             call("timeline_append", kind="test_failed", summary="the run crashed")),
        turn(TESTER_NOTE),
    ]
    return {
        "sessions": {
            "coder.*.u": {"turns": dict(enumerate(coder, 1)), "default": turn("Done.")},
            "tester.*.u": {"turns": dict(enumerate(tester, 1)), "default": turn("Done.")},
            "*.reassess.*": {"default": turn("1. Re-read the spec.")},
        },
        "default": turn("Nothing scripted."),
    }


def user_texts(body: dict[str, Any]) -> str:
    """Every text and tool result the model was sent, as one string."""
    return json.dumps([m["content"] for m in body["messages"] if m["role"] == "user"])


@pytest.mark.timeout(300)
def test_a_crash_raised_in_code_goes_to_the_coder_with_both_summaries_and_its_frame(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    project = build(tmp_path / "p", [UnitPlan("u")])
    with chains(redis_store, settings, project, script()) as c:
        c.run()
        requests = [(r.session_key.split(".")[0], r.body) for r in c.stub.requests]
    tester = [body for role, body in requests if role == "tester"]
    coder = [body for role, body in requests if role == "coder"]
    # One call wrote contract.json with its hash; syntax_check ran the runtime's check.
    answered = user_texts(coder[2])
    assert '\\"bridge\\": {\\"ok\\": true' in user_texts(coder[1])
    assert '\\"ok\\": true, \\"problems\\": [], \\"command\\": \\"python -c' in answered
    assert "py_compile" in answered
    # The coder's closing words reach the tester's first turn, fenced as data.
    label = "what the coder said when it finished attempt 1, for you among others"
    first = tester[0]["messages"][0]["content"][0]["text"]
    assert f"[untrusted data: {label}." in first and CODER_NOTE in first
    # run_tests told the tester whose crash it was.
    said = user_texts(tester[2])
    assert "the code under test raised while the tests loaded it (at code/unit.py:1)" in said
    assert "the coder gets this crash with its code frame" in said
    # The crash went to the coder at once: one tester session (4 turns), no second try.
    assert len(tester) == 4
    steps = steps_of(redis_store, c.pid, ["u"])["u"]
    decided = [(s.attempt, s.status) for s in steps if s.role == "decide"]
    assert decided == [(1, "retry_coder"), (2, "pass")]
    # The coder's retry has the crash with its code frame and the tester's analysis.
    retry = next(b for b in coder if "Retry history" in user_texts(b))
    text = user_texts(retry)
    assert "raised at code/unit.py:1 in your code" in text
    assert "the tester's closing summary of attempt 1: its analysis of the run" in text
    assert TESTER_NOTE in text
    # Attempt 2's green came from re-running attempt 1's tests: no tester session, and the
    # status says on which code.
    [again] = [s for s in steps if s.role == "tester" and s.attempt == 2]
    assert (again.tokens, again.output["rerun"], again.output["tests_from_attempt"]) == (0, True, 1)
    [row] = project_status(redis_store, c.pid).units
    assert row.status == "passed"
    assert row.note == ("green on attempt 2's code: attempt 1's tests re-ran unchanged, no "
                        "tester session needed (0 tokens)")
