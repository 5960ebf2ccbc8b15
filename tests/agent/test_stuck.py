"""Stuck detection fires on measured behaviour and hands one turn to a read-only reassess."""

from __future__ import annotations

from typing import Any

from devloop.agent.stuck import StuckThresholds, StuckTracker
from tests.agent.harness import KEY, MakeHarness
from tests.agent.test_loop import text, tool

PLAN = "1. Read spec.json once.\n2. Write code/server.js.\nDo not touch again: spec.json"


def with_reassess(main: dict[int, Any], default: dict[str, Any]) -> dict[str, Any]:
    return {
        "sessions": {
            KEY: {"turns": main, "default": default},
            f"{KEY}.reassess.*": {"turns": {1: tool("Read", path="spec.json"), 2: text(PLAN)}},
        }
    }


def test_same_call_three_times_runs_reassess_and_pins_its_plan(make_harness: MakeHarness) -> None:
    h = make_harness(
        with_reassess(
            {
                1: tool("Read", path="spec.json"),
                2: tool("Read", path="spec.json"),
                3: tool("Read", path="spec.json"),
                4: text("following the plan; done"),
            },
            text("done"),
        )
    )
    result = h.session().run("go")
    assert result.status == "completed" and result.turns == 4
    reassess = h.requests(f"{KEY}.reassess.1.1")
    assert len(reassess) == 2
    tool_names = [t["name"] for t in reassess[0].body["tools"]]
    assert tool_names == ["Read", "Bash"]  # read-only flavor
    assert "the same tool call 3 times in a row" in reassess[0].body["system"][0]["text"]
    pinned_system = h.requests()[-1].body["system"][0]["text"]
    assert "## Pinned" in pinned_system and PLAN in pinned_system


def test_same_error_three_times_trips(make_harness: MakeHarness) -> None:
    h = make_harness(
        with_reassess(
            {
                1: tool("Bash", command="exit 3"),
                2: tool("Bash", command="exit  3"),
                3: tool("Bash", command=" exit 3"),
                4: text("done"),
            },
            text("done"),
        )
    )
    result = h.session(reassess=False).run("go")
    assert result.status == "stuck" and result.terminal_reason == "stuck"
    assert "the same error 3 times" in (result.failure_summary or "")


def test_no_workspace_change_for_n_turns_trips(make_harness: MakeHarness) -> None:
    reads = {
        i + 1: tool("Read", path=p)
        for i, p in enumerate(["spec.json", "../../units.json", "coder.log", "contract.json"])
    }
    h = make_harness(with_reassess(reads, text("done")))
    result = h.session(reassess=False, stuck=StuckThresholds(idle_turns=3)).run("go")
    assert result.status == "stuck"
    assert "no change to the workspace for 3 turns" in (result.failure_summary or "")
    assert result.turns == 4


def test_stuck_again_after_reassess_ends_the_session(make_harness: MakeHarness) -> None:
    h = make_harness(with_reassess({}, tool("Read", path="spec.json")))
    result = h.session().run("go")
    assert result.status == "stuck"
    assert len(h.requests(f"{KEY}.reassess.1.1")) == 2
    assert result.turns == 6  # 3 repeats, reassess, 3 repeats again


def test_tracker_counts_are_reset_by_a_reassess() -> None:
    tracker = StuckTracker(StuckThresholds(same_call=2))
    tracker.observe_call("Read", {"path": "a"}, None)
    tracker.observe_call("Read", {"path": "a"}, None)
    assert tracker.tripped() == "the same tool call 2 times in a row"
    tracker.reset()
    assert tracker.tripped() is None
    restored = StuckTracker.from_dict(tracker.to_dict(), StuckThresholds())
    assert restored.to_dict() == tracker.to_dict()
