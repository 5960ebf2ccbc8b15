"""The seeded imperfect model, over HTTP with the real client, playing `devloop new`'s script.

The runtime's side of each conversation is played here by the real tools' input checks:
a call whose input a tool refuses gets that tool's own error text; any other call gets
"ok". (How the whole runtime answers is tests/fleet/test_imperfect.py's.)
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest
from pydantic import ValidationError

from devloop.agent.toolloop import REMINDER
from devloop.agent.tools import Tool
from devloop.llm.stub import StubServer
from devloop.llm.stub.imperfect import SLIP_KINDS
from devloop.project.load import load_project
from devloop.roles.registry import all_tools
from devloop.scaffold.script import trivial_script
from devloop.scaffold.write import scaffold

Start = Callable[..., StubServer]
TOOLS: dict[str, Tool] = {t.name: t for t in all_tools()}
SPEC = """\
company_id: c-t
project_id: p-imp
stack: python
units:
  - id: calc
    kind: lib
    exports: {module: {code/calc.py: {"total()": "-> int", "name()": "-> str"}}}
    acceptance: [total() returns 0, name() returns the unit id]
"""
TASK = "# Data for this attempt\n\n(none)\n\n# Task\n\nImplement unit calc."
CODER, TESTER = "coder.c-t.p-imp.calc", "tester.c-t.p-imp.calc"


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root: Path = tmp_path_factory.mktemp("imp")
    (root / "spec.yaml").write_text(SPEC)
    scaffold(root / "spec.yaml", root / "p", script=False)
    return trivial_script(load_project(root / "p"))


def imperfect(script: dict[str, Any], seed: int = 1, rate: float = 0.0,
              **rates: float) -> dict[str, Any]:
    return {**script, "imperfect": {"seed": seed, "rate": rate, "rates": rates}}


def answer(call: dict[str, Any]) -> dict[str, Any]:
    """What the tools say of a call: the tool's own refusal of its input, else ok."""
    tool = TOOLS[call["name"]]
    try:
        tool.Input.model_validate(call["input"])
    except ValidationError:
        refused = tool.execute(None, call["input"])  # type: ignore[arg-type]  # refused first
        return {"type": "tool_result", "tool_use_id": call["id"], "content": refused.text,
                "is_error": True}
    return {"type": "tool_result", "tool_use_id": call["id"], "content": "ok"}


def talk(stub: StubServer, key: str, then: tuple[str, ...] = (), turns: int = 12) -> list[Any]:
    """One attempt: the task, the tools' answers to each turn, and after the model's first
    closing text each of `then` as the runtime's next message. Every answer, in order."""
    client = anthropic.Anthropic(api_key="t", base_url=stub.base_url, max_retries=0)
    role = key.split(".")[0]
    tools = [TOOLS[n].spec().model_dump() for n in TOOLS
             if n not in (("run_tests", "set_hint", "bug_open") if role == "coder"
                          else ("verify_tests", "append_coder_log", "contract_bridge"))]
    messages: list[Any] = [{"role": "user", "content": TASK}]
    answers: list[Any] = []
    later = list(then)
    for _ in range(turns):
        reply = client.messages.create(  # type: ignore[call-overload]
            model="claude-sonnet-4-6", max_tokens=4096, tools=tools, messages=messages,
            metadata={"user_id": key})
        content = [b.model_dump(exclude_none=True) for b in reply.content]
        answers.append({"stop": reply.stop_reason, "content": content})
        messages.append({"role": "assistant", "content": content})
        calls = [b for b in content if b["type"] == "tool_use"]
        if calls:
            messages.append({"role": "user", "content": [answer(c) for c in calls]})
        elif reply.stop_reason == "max_tokens":
            messages.append({"role": "user", "content": "Your reply hit the output limit."})
        elif later:
            messages.append({"role": "user", "content": later.pop(0)})
        else:
            break
    return answers


def calls_of(answers: list[Any]) -> list[dict[str, Any]]:
    return [b for a in answers for b in a["content"] if b["type"] == "tool_use"]


def test_the_same_seed_and_requests_make_the_same_run(
    stub_server: Start, script: dict[str, Any]
) -> None:
    runs = [[talk(stub_server(imperfect(script, seed, 0.5)), key) for key in (CODER, TESTER)]
            for seed in (7, 7, 8)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]  # the seed decides which slips happen


def test_at_rate_zero_it_plays_the_script_as_written(
    stub_server: Start, script: dict[str, Any]
) -> None:
    plain = [talk(stub_server(script), key) for key in (CODER, TESTER)]
    assert [talk(stub_server(imperfect(script)), key) for key in (CODER, TESTER)] == plain
    # A slip's own rate of 0 wins over `rate`: never, whatever the seed.
    never = {k: 0.0 for k in SLIP_KINDS}
    for seed in (1, 2, 3):
        assert [talk(stub_server(imperfect(script, seed, 1.0, **never)), key)
                for key in (CODER, TESTER)] == plain
    assert [len(a) for a in plain] == [2, 2]  # the work, then the closing words


SIGNS: dict[str, Callable[[list[Any], list[Any]], bool]] = {
    # (the imperfect answers, the script's answers) -> the slip shows
    "forget_bookkeeping": lambda got, want: any(
        sum(c["name"] == k for c in calls_of(got[:1])) < sum(c["name"] == k
                                                             for c in calls_of(want))
        for k in ("update_todo_item", "timeline_append", "append_coder_log")),
    "bad_arguments": lambda got, want: any(answer(c).get("is_error") for c in calls_of(got)),
    "wrong_fix": lambda got, want: any(
        c["name"] == "Write" and c["input"]["path"].startswith("code/")
        and "return None" in c["input"]["content"] for c in calls_of(got)),
    "weak_test": lambda got, want: any(
        c["name"] == "Write" and "or True" in c["input"]["content"] for c in calls_of(got)),
    "tests_first": lambda got, want: calls_of(got)[0]["name"] in ("verify_tests", "run_tests"),
    "repeat_edit": lambda got, want: any(
        a["content"][1:] == [c for c in calls_of(got[:i])
                             if c["name"] == "Write"][:1] and len(a["content"]) == 2
        for i, a in enumerate(got)) or len([json.dumps(c["input"]) for c in calls_of(got)
                                            if c["name"] == "Write"]) > len(
        [c for c in calls_of(want) if c["name"] == "Write"]),
    "early_end": lambda got, want: len(calls_of(got[:2])) < len(calls_of(want))
    and not [b for b in got[1]["content"] if b["type"] == "tool_use"],
    "long_text": lambda got, want: got[0]["stop"] == "max_tokens"
    and len(got[0]["content"][0]["text"]) >= 6000,
}


@pytest.mark.parametrize("kind", SLIP_KINDS)
def test_each_slip_happens_at_rate_one(stub_server: Start, script: dict[str, Any],
                                      kind: str) -> None:
    key = TESTER if kind == "weak_test" else CODER
    want = talk(stub_server(script), key)
    assert not SIGNS[kind](want, want)
    for seed in (1, 2, 3):
        assert SIGNS[kind](talk(stub_server(imperfect(script, seed, **{kind: 1.0})), key), want)


def test_a_refused_call_is_made_again_right_next_turn(
    stub_server: Start, script: dict[str, Any]
) -> None:
    got = talk(stub_server(imperfect(script, bad_arguments=1.0)), CODER)
    refused = [c for c in calls_of(got[:1]) if answer(c).get("is_error")]
    again = [b for b in got[1]["content"] if b["type"] == "tool_use"]
    assert len(refused) == 1 and [c["name"] for c in again] == [refused[0]["name"]]
    assert not answer(again[0]).get("is_error")
    assert len(got) == 3  # then its closing words


def test_the_reminder_and_a_failed_check_get_what_they_name(
    stub_server: Start, script: dict[str, Any]
) -> None:
    owed = (f"{REMINDER}\n- coder.log has no entry for attempt 1: call append_coder_log with "
            "this_fix and rationale\n- todolist items not done: step-002, step-005: mark each "
            "with update_todo_item, done or skipped ('Write code/', 'Log the decision')")
    failed = ("The runtime's self-check failed; fix each item, then finish again:\n"
              "- contract_bridge: contract.json is missing")
    got = talk(stub_server(imperfect(script, forget_bookkeeping=1.0)), CODER, (owed, failed))
    assert [a["content"][-1]["type"] for a in got] == ["tool_use", "text", "tool_use", "text",
                                                       "tool_use", "text"]
    given = [(c["name"], c["input"].get("id")) for c in calls_of(got[2:3])]
    assert given == [("append_coder_log", None), ("update_todo_item", "step-002"),
                     ("update_todo_item", "step-005")]
    # A failure of the work: the work again, as the script has it.
    assert [c["name"] for c in calls_of(got[4:5])] == [c["name"] for c in calls_of(
        talk(stub_server(script), CODER))]
