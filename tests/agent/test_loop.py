"""Whole sessions through the real anthropic client against the stub server."""

from __future__ import annotations

from typing import Any

from devloop.agent.spec import Budgets
from devloop.agent.stuck import StuckThresholds
from tests.agent.harness import KEY, PID, UNIT, MakeHarness


def tool(name: str, **args: Any) -> dict[str, Any]:
    return {"content": [{"tool_use": {"name": name, "input": args}}]}


def text(value: str) -> dict[str, Any]:
    return {"content": [{"text": value}]}


def script(*turns: dict[str, Any], default: dict[str, Any] | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"turns": {i + 1: t for i, t in enumerate(turns)}}
    if default:
        entry["default"] = default
    return {"sessions": {KEY: entry}, "default": text("Nothing scripted.")}


SERVER_JS = "const express = require('express');\nmodule.exports = express();\n"


def test_multi_turn_tool_session_reads_writes_runs_and_finishes(make_harness: MakeHarness) -> None:
    h = make_harness(
        script(
            tool("Read", path="spec.json"),
            tool("Write", path="code/server.js", content=SERVER_JS),
            tool("Bash", command="node --check code/server.js && echo syntax-ok"),
            text("Wrote code/server.js; node --check passes."),
        )
    )
    result = h.session().run("Implement todo-be.")
    assert result.status == "completed" and result.terminal_reason == "end_turn"
    assert result.turns == 4 and result.changed_files == ["code/server.js"]
    assert (h.workspace.unit_dir / "code/server.js").read_text() == SERVER_JS
    requests = h.requests()
    assert [r.turn for r in requests] == [1, 2, 3, 4]
    # The file's contents came back fenced as untrusted data; the Bash output too.
    read_result = requests[1].body["messages"][-1]["content"][0]
    assert read_result["type"] == "tool_result" and "untrusted data" in read_result["content"]
    assert "todo-be" in read_result["content"]
    bash_result = requests[3].body["messages"][-1]["content"][0]["content"]
    assert "syntax-ok" in bash_result and "exit code 0" in bash_result
    # The moving breakpoint makes every turn after the first re-read its prefix.
    assert result.usage.cache_read_input_tokens > result.usage.input_tokens
    assert [e.turn for e in h.events if e.kind == "turn"] == [1, 2, 3, 4]


def test_transient_faults_are_survived(make_harness: MakeHarness) -> None:
    h = make_harness(
        script(
            {**tool("Read", path="spec.json"), "fault": {"kind": "rate_limit", "times": 1}},
            {**tool("Read", path="spec.json"), "fault": {"kind": "overloaded", "times": 2}},
            {**tool("Read", path="spec.json"), "fault": {"kind": "server_error", "times": 1}},
            {**text("done"), "fault": {"kind": "drop", "times": 1}},
        )
    )
    result = h.session(stuck=StuckThresholds(same_call=10)).run("go")
    assert result.status == "completed" and result.turns == 4
    statuses = [r.status for r in h.requests()]
    assert statuses == [429, 200, 529, 529, 200, 500, 200, 0, 200]


def test_exhausted_retries_end_the_session_as_recovery_required(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(script({**text("never"), "fault": {"kind": "overloaded", "times": 50}}))
    result = h.session().run("go")
    assert result.status == "recovery_required" and result.terminal_reason == "llm_unavailable"
    assert "529" in (result.failure_summary or "")
    assert len(h.requests()) == 4  # one try and three retries


def test_malformed_tool_input_and_unknown_tools_come_back_as_observations(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        script(
            {**tool("Read", path="spec.json"), "fault": "malformed_tool_input"},
            {**tool("Read", path="spec.json"), "fault": "unknown_tool"},
            tool("call_sub_agent", task="do it for me"),
            text("done"),
        )
    )
    result = h.session().run("go")
    assert result.status == "completed"
    observations = [r.body["messages"][-1]["content"][0] for r in h.requests()[1:]]
    assert observations[0]["is_error"] and "invalid input for Read" in observations[0]["content"]
    assert (
        observations[1]["is_error"] and "denied: tool 'no_such_tool'" in observations[1]["content"]
    )
    assert "denied: tool 'call_sub_agent'" in observations[2]["content"]


def test_a_malformed_call_gets_the_schema_error_and_the_fix_and_the_next_turn_succeeds(
    make_harness: MakeHarness,
) -> None:
    items = [{"id": "step-001", "title": "write code/server.js"}]
    h = make_harness(
        script(
            {**tool("write_todolist", items=items), "fault": "malformed_tool_input"},
            tool("write_todolist", items=items),
            tool("write_todolst", items=items),  # a misspelt name
            tool("Write", path="code/x.js"),  # a missing argument
            tool("Write", path="code/x.js", content="x"),
            text("done"),
        )
    )
    result = h.session().run("go")
    assert result.status == "completed" and result.turns == 6
    bad, good, misspelt, missing, written = [
        r.body["messages"][-1]["content"][0] for r in h.requests()[1:6]
    ]
    # The schema error names the field and what is wrong; the fix says what the field is,
    # the input's shape and an example; the session goes on, and the next call succeeds.
    assert bad["is_error"] and bad["content"] == (
        "invalid input for write_todolist: items: Input should be a valid list. Fix: items "
        "is [{id: string, title: string}] (The plan, in order.); call write_todolist again "
        "with input shaped {items: [{id: string, title: string}]}, e.g. "
        '{"items": [{"id": "step-001", "title": "..."}]}.'
    )
    assert not good["is_error"] and good["content"] == "todolist written: 1 items"
    assert misspelt["is_error"] and "did you mean write_todolist?" in misspelt["content"]
    assert missing["is_error"] and missing["content"] == (
        "invalid input for Write: content: Field required. Fix: content is string (The whole "
        "new content of the file.); call Write again with input shaped {path: string, "
        'content: string}, e.g. {"path": "code/service.js", "content": "..."}.'
    )
    assert not written["is_error"] and (h.workspace.root / "units/todo-be/code/x.js").exists()


def test_each_budget_ends_the_session_with_its_own_reason(make_harness: MakeHarness) -> None:
    busy = {**tool("Bash", command="echo $$ > code/n.txt"), "latency_ms": 100}
    cases = {
        "budget_turns": Budgets(max_turns=3),
        "budget_tokens": Budgets(max_tokens=3000),
        "budget_usd": Budgets(max_usd=0.004),
        "budget_wall_time": Budgets(max_wall_s=0.5),
    }
    h = make_harness(script(default=busy))
    for reason, budgets in cases.items():
        h.store.drop_session(PID, "coder", UNIT)
        session = h.session(budgets=budgets, stuck=StuckThresholds(same_call=99, idle_turns=99))
        result = session.run("go")
        assert (result.status, result.terminal_reason) == ("budget_exceeded", reason)
        assert 0 < result.turns < 20
