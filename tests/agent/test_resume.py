"""A session whose process dies resumes from its checkpoint; finished sessions never re-run."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from devloop.server.redis_server import RedisServer
from tests.agent.harness import KEY, PID, UNIT, MakeHarness
from tests.agent.test_loop import script, text, tool
from tests.leftovers import views_of_killed_processes


def test_killed_session_resumes_without_repeating_a_turn(
    make_harness: MakeHarness, redis_server: RedisServer
) -> None:
    h = make_harness(
        script(
            tool("Write", path="code/a.js", content="module.exports = 1;\n"),
            tool("Bash", command="sleep 4; echo slept"),
            text("done"),
        )
    )
    assert h.stub is not None
    with views_of_killed_processes():
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.agent.session_child", redis_server.url,
             h.stub.base_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                state = h.store.load_session(PID, "coder", UNIT)
                if state and state["turns"] == 2 and state["next"] == "tools":
                    break  # turn 2 (the slow Bash call) is answered and being executed
                time.sleep(0.05)
            else:
                raise AssertionError("the child never reached turn 2")
            time.sleep(0.5)
        finally:
            child.send_signal(signal.SIGKILL)
            child.communicate(timeout=10)
    assert [r.turn for r in h.requests()] == [1, 2]

    # A fresh view (not the dead process's scratch dir) gets its changes back.
    h.workspace.cleanup()
    h.workspace.materialize()
    assert h.workspace.root is not None
    h.ctx.view = h.workspace.root
    result = h.session().run("Implement todo-be.")
    assert result.status == "completed" and result.turns == 3
    assert [r.turn for r in h.requests()] == [1, 2, 3]  # no model turn asked twice
    assert (h.workspace.unit_dir / "code/a.js").read_text() == "module.exports = 1;\n"
    last = h.requests()[-1].body["messages"]
    assert "slept" in last[-1]["content"][0]["content"]


def test_finished_session_is_not_run_again(make_harness: MakeHarness) -> None:
    h = make_harness(script(tool("Read", path="spec.json"), text("done")))
    first = h.session().run("go")
    again = h.session().run("go")
    assert again == first
    assert len(h.requests()) == 2


def test_a_retry_attempt_continues_the_same_conversation(make_harness: MakeHarness) -> None:
    h = make_harness(
        {
            "sessions": {
                KEY: {
                    "turns": {
                        1: text("first attempt done"),
                        2: tool("Read", path="spec.json"),
                        3: text("second attempt done"),
                    }
                }
            }
        }
    )
    first = h.session(attempt=1).run("Implement todo-be.")
    second = h.session(attempt=2, mode="retry").run("Retry: the tester said 400 != 500.")
    assert (first.final_text, second.final_text) == ("first attempt done", "second attempt done")
    assert second.attempt == 2 and second.turns == 2
    messages = h.requests()[-1].body["messages"]
    texts = [b.get("text") for m in messages for b in m["content"] if b.get("type") == "text"]
    assert texts[:3] == [
        "Implement todo-be.",
        "first attempt done",
        "Retry: the tester said 400 != 500.",
    ]


def test_a_session_the_model_outage_ended_resumes_with_a_real_call(
    make_harness: MakeHarness,
) -> None:
    # The harness's provider tries 4 times: the outage outlasts them once.
    h = make_harness(script(
        tool("Write", path="code/a.js", content="module.exports = 1;\n"),
        {**text("done"), "fault": {"kind": "overloaded", "times": 4}},
    ))
    first = h.session().run("Implement todo-be.")
    assert (first.status, first.terminal_reason) == ("recovery_required", "llm_unavailable")
    again = h.session().run("Implement todo-be.")
    assert again.status == "completed" and again.final_text == "done"
    assert [(r.turn, r.status) for r in h.requests()] == [(1, 200)] + [(2, 529)] * 4 + [(2, 200)]
    assert (h.workspace.unit_dir / "code/a.js").read_text() == "module.exports = 1;\n"
    # Ended for good now: a third run returns the result without asking again.
    assert h.session().run("Implement todo-be.") == again and len(h.requests()) == 6


def test_a_second_try_of_the_same_attempt_gets_model_turns_of_its_own(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(script(text("try 1 done"), text("try 2 done")))
    first = h.session().run("Test todo-be.")
    second = h.session(try_no=2, mode="retry").run("Your last try did not stand.")
    assert (first.final_text, second.final_text) == ("try 1 done", "try 2 done")
    assert [r.turn for r in h.requests()] == [1, 2]
    # A late redelivery of try 1 is superseded, not run again.
    late = h.session().run("Test todo-be.")
    assert late.status == "cancelled" and len(h.requests()) == 2


def test_a_session_whose_context_filled_up_resumes_and_carries_on(
    make_harness: MakeHarness,
) -> None:
    full = {**text("I was writing"), "stop_reason": "model_context_window_exceeded"}
    h = make_harness(script(full, text("done")))
    first = h.session().run("Implement todo-be.")
    assert (first.status, first.terminal_reason) == ("recovery_required", "context_window")
    again = h.session().run("Implement todo-be.")
    assert again.status == "completed" and again.final_text == "done"
    last = h.requests()[-1].body["messages"]
    assert last[-1]["role"] == "user" and "Continue" in last[-1]["content"][-1]["text"]


def test_a_checkpoint_saved_as_a_plain_dict_before_the_newer_keys_resumes(
    make_harness: MakeHarness,
) -> None:
    """A checkpoint as an older DevLoop saved it (no try, no errors window, no best state,
    none of the reminder's keys) is this session's, and carries on where it stopped."""
    h = make_harness(script(tool("Read", path="spec.json"), text("done")))
    old = {
        "session_key": KEY, "attempt": 1, "mode": "implement",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Implement todo-be."}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                               "name": "Read", "input": {"path": "spec.json"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                          "content": "{}", "is_error": False}]},
        ],
        "next": "query", "turns": 1, "usage": {"input_tokens": 10, "output_tokens": 5},
        "cost_usd": 0.01, "elapsed_ms": 1200, "self_checks": 0, "reassessed": 0,
        "pinned": [], "stuck": {}, "changed_files": ["code/a.js"], "last_error": None,
        "finished": False, "result": None, "workspace": None,
    }
    h.store.save_session(PID, "coder", UNIT, old)
    result = h.session().run("Implement todo-be.")
    assert result.status == "completed" and result.turns == 2
    assert [r.turn for r in h.requests()] == [2]  # turn 1 was answered before: never asked again
    assert result.changed_files == ["code/a.js"] and result.cost_usd >= 0.01
    saved = h.store.load_session(PID, "coder", UNIT)
    assert saved is not None and saved["finished"] and saved["try"] == 1
    assert saved["errors"] == [] and saved["best"] is None and saved["paperwork_missing"] == []


def test_a_session_that_finished_before_its_commit_gives_a_fresh_view_its_files_back(
    make_harness: MakeHarness,
) -> None:
    # The process died after the finished checkpoint and before the step committed: the
    # step runs again on a fresh view, and the stored result must come with its files, or
    # the commit that follows would commit nothing (seen: a SIGTERMed run's resume).
    h = make_harness(script(
        tool("Write", path="code/a.js", content="module.exports = 1;\n"), text("done"),
    ))
    first = h.session().run("Implement todo-be.")
    h.workspace.cleanup()
    h.workspace.materialize()
    assert h.workspace.root is not None
    h.ctx.view = h.workspace.root
    assert not (h.workspace.unit_dir / "code/a.js").exists()
    session = h.session()
    again = session.run("Implement todo-be.")
    assert again == first and len(h.requests()) == 2  # the model is not asked again
    assert session.final_plan() == "done"  # the closing handoff, which the step saves after
    assert (h.workspace.unit_dir / "code/a.js").read_text() == "module.exports = 1;\n"
