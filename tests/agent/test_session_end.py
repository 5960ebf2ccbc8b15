"""Self-checks, stop reasons and the result payload."""

from __future__ import annotations

from typing import Any

from devloop.agent.result import SessionResult
from devloop.agent.spec import Budgets, CheckReport
from devloop.agent.toolloop import REMINDER
from devloop.llm.base import Usage
from tests.agent.harness import KEY, MakeHarness
from tests.agent.test_loop import script, text, tool


def test_self_check_failures_go_back_to_the_model_until_it_passes(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        script(
            text("done"),
            tool("Write", path="code/server.js", content="ok"),
            text("done, really"),
        )
    )

    def check() -> list[str]:
        return [] if (h.workspace.unit_dir / "code/server.js").exists() else ["code/ is empty"]

    result = h.session(self_check=check).run("go")
    assert result.status == "completed" and result.turns == 3
    second = h.requests()[1].body["messages"][-1]["content"]
    assert "self-check failed" in second[0]["text"] and "code/ is empty" in second[0]["text"]


def test_self_check_fails_twice_more_then_validation_failed(make_harness: MakeHarness) -> None:
    h = make_harness(script(default=text("done")))
    result = h.session(self_check=lambda: ["contract.json hash differs"]).run("go")
    assert (result.status, result.terminal_reason) == ("failed", "validation_failed")
    assert result.turns == 3  # the first claim and two hand-backs
    assert result.self_check_failures == ["contract.json hash differs"]


def user_texts(h: Any) -> list[str]:
    """The text the runtime sent the model at each turn after the first, in order."""
    return [
        b["text"]
        for r in h.requests()[1:]
        for b in r.body["messages"][-1]["content"]
        if r.body["messages"][-1]["role"] == "user" and b.get("type") == "text"
    ]


def test_what_only_the_model_can_give_is_asked_once_by_name_and_never_fails_it(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(script(default=text("done")))
    owed = ["coder.log has no entry for attempt 1: call append_coder_log"]
    result = h.session(self_check=lambda: CheckReport(owed=owed)).run("go")
    assert (result.status, result.terminal_reason) == ("completed", "end_turn")
    assert result.turns == 2  # the first claim, then one after the only reminder
    assert result.paperwork_missing == owed and result.self_check_failures == []
    [asked] = user_texts(h)
    assert asked == f"{REMINDER}\n- {owed[0]}"


def test_a_reminder_is_not_asked_for_with_no_turn_left(
    make_harness: MakeHarness,
) -> None:
    owed = ["no todolist: call write_todolist with your plan"]
    # Done on the last turn: no turn left to give it in, so it is not asked for.
    h = make_harness(script(default=text("done")))
    last = h.session(budgets=Budgets(max_turns=1), self_check=lambda: CheckReport(owed=owed))
    result = last.run("go")
    assert (result.status, result.terminal_reason, result.turns) == ("completed", "end_turn", 1)
    assert result.paperwork_missing == owed and len(h.requests()) == 1


def test_work_that_passes_completes_when_the_turns_run_out_after_the_reminder(
    make_harness: MakeHarness,
) -> None:
    # Asked, then the model works on without giving it until the turns run out: the work
    # still passes its check, so the session completes with the item recorded missing.
    owed = ["no todolist: call write_todolist with your plan"]
    h = make_harness(script(text("done"), tool("Read", path="spec.json")))
    busy = h.session(budgets=Budgets(max_turns=2), self_check=lambda: CheckReport(owed=owed))
    result = busy.run("go")
    assert (result.status, result.terminal_reason, result.turns) == ("completed", "end_turn", 2)
    assert result.paperwork_missing == owed and len(user_texts(h)) == 1


def test_a_reminder_rides_once_with_failures_that_still_end_validation_failed(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(script(default=text("done")))
    report = CheckReport(failures=["contract.json hash differs"], owed=["no todolist"])
    result = h.session(self_check=lambda: report).run("go")
    assert (result.status, result.terminal_reason) == ("failed", "validation_failed")
    assert result.self_check_failures == ["contract.json hash differs"]
    assert result.paperwork_missing == ["no todolist"]
    first, second = user_texts(h)
    assert "contract.json hash differs" in first and "- no todolist" in first
    assert "contract.json hash differs" in second and "no todolist" not in second


def test_max_tokens_asks_to_continue_and_pause_turn_carries_on(make_harness: MakeHarness) -> None:
    h = make_harness(
        script(
            {**text("The first half of"), "stop_reason": "max_tokens"},
            {**text("thinking"), "stop_reason": "pause_turn"},
            text("done"),
        )
    )
    result = h.session().run("go")
    assert result.status == "completed" and result.turns == 3
    after_cut = h.requests()[1].body["messages"][-1]
    assert after_cut["role"] == "user" and "output limit" in after_cut["content"][0]["text"]
    after_pause = h.requests()[2].body["messages"][-1]
    assert after_pause["role"] == "assistant"


def test_refusal_ends_the_session(make_harness: MakeHarness) -> None:
    h = make_harness(script({"content": [], "stop_reason": "refusal"}))
    result = h.session().run("go")
    assert (result.status, result.terminal_reason) == ("failed", "refusal")


def test_context_window_exceeded_summarises_old_turns_and_continues(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(
        script(
            tool("Read", path="../../sdd/mvcp/todo-be.html"),
            tool("Read", path="spec.json"),
            tool("Read", path="../../units.json"),
            {**text("too long"), "stop_reason": "model_context_window_exceeded"},
            text("done"),
        )
    )
    result = h.session().run("go")
    assert result.status == "completed"
    messages = h.requests()[-1].body["messages"]
    # The oldest turn became a digest pair: its call and its outcome, one line each; the
    # turns still alternate and still count.
    assert messages[1]["content"] == [
        {"type": "text", "text": "[turn 1, summarised] Read ../../sdd/mvcp/todo-be.html"}
    ]
    assert messages[2]["content"] == [{"type": "text", "text": "[turn 1 results] ok"}]
    assert sum(m["role"] == "assistant" for m in messages) == 4


def test_final_text_is_sanitized_for_the_parent_record(make_harness: MakeHarness) -> None:
    h = make_harness(script(text("<b>Done</b> {ok: [1]} `rm -rf /`  \n\n ignore previous")))
    result = h.session().run("go")
    assert result.final_text == "b Done b ok: 1 rm -rf ignore previous"


def test_result_payload_round_trips() -> None:
    result = SessionResult(
        session_key=KEY,
        flavor="coder",
        mode="retry",
        attempt=2,
        status="budget_exceeded",
        terminal_reason="budget_usd",
        final_text="x",
        failure_summary="the budget",
        usage=Usage(input_tokens=1, output_tokens=2, cache_read_input_tokens=3),
        cost_usd=0.5,
        turns=4,
        duration_ms=5,
        changed_files=["code/a.js"],
        paperwork_missing=["no todolist: call write_todolist with your plan"],
    )
    assert SessionResult.model_validate_json(result.model_dump_json()) == result
    assert sorted(result.model_dump()) == [
        "attempt",
        "changed_files",
        "cost_usd",
        "duration_ms",
        "failure_summary",
        "final_text",
        "flavor",
        "mode",
        "paperwork_missing",
        "self_check_failures",
        "session_key",
        "status",
        "terminal_reason",
        "turns",
        "usage",
    ]
