"""Context regions: a long session is summarised, not cut, and its pinned regions stay."""

from __future__ import annotations

from typing import Any

from devloop.agent.context import approx_tokens, compact, fit, region_block
from devloop.agent.stuck import StuckThresholds
from tests.agent.harness import MakeHarness
from tests.agent.test_loop import text, tool
from tests.agent.test_stuck import PLAN, with_reassess

BUDGET = 12_000
# Six distinct failures: the window keeps the last five.
FAILURES = [
    "no such table: orders",
    "cannot import name pricing",
    "KeyError: discount",
    "TypeError: title is undefined",
    "ValueError: qty below one",
    "ZeroDivisionError: total",
]


def long_script() -> dict[int, Any]:
    """60 turns: a repeated Read (stuck, so a plan is pinned), six distinct failures,
    and big command outputs that overflow the budget many times over."""
    turns: dict[int, Any] = {}
    failures = iter(FAILURES)
    for n in range(1, 60):
        if n in (2, 3, 4):
            turns[n] = tool("Read", path="spec.json")
        elif n % 9 == 0:
            turns[n] = tool("Bash", command=f"echo '{next(failures)}' >&2; exit 2")
        else:
            turns[n] = tool("Bash", command=f"seq {n} {n + 600}")
    turns[60] = text("done")
    return turns


def test_a_sixty_turn_session_stays_under_budget_with_its_pinned_regions(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(with_reassess(long_script(), text("done")))
    session = h.session(
        stuck=StuckThresholds(idle_turns=99), context_budget_tokens=BUDGET
    )
    result = session.run("Implement todo-be: THE TASK.")
    assert (result.status, result.turns) == ("completed", 60)
    main = h.requests()
    # Every turn was asked once and in order: summarised turns still count as turns.
    assert [r.turn for r in main] == list(range(1, 61))
    # The cache_control marker the provider adds is the only slack over the budget.
    sizes = [approx_tokens(r.body["messages"]) for r in main]
    assert max(sizes) <= BUDGET + 20, sizes
    assert sum(size > BUDGET * 0.6 for size in sizes) < 60  # it did have to compact
    last = main[-1].body["messages"]
    texts = [b.get("text", "") for m in last for b in m["content"] if b.get("type") == "text"]
    assert texts[0] == "Implement todo-be: THE TASK."  # the task is pinned
    assert any(t.startswith("[turn 1, summarised] Bash seq 1 601") for t in texts)
    assert sum(PLAN in t for t in texts) == 1  # the reassess plan is pinned
    windows = [t for t in texts if t.startswith("Errors window:")]
    assert windows, "the newest errors window is pinned"
    assert all(f in windows[-1] for f in FAILURES[1:]) and FAILURES[0] not in windows[-1]
    assert "the last 5 distinct failures" in windows[-1]
    # Compaction is in bulk: most turns still read their prefix from the cache.
    u = result.usage
    assert u.cache_read_input_tokens / u.prompt_tokens > 0.6
    assert session.state.compacted > 0


def test_compaction_keeps_pairs_and_every_plan_but_only_the_newest_errors_window() -> None:
    old_window = region_block("errors", "Errors window: old")
    new_window = region_block("errors", "Errors window: new")
    plan = region_block("plan", "the plan")
    big = "x" * 4000
    task = {"type": "text", "text": "task"}
    messages: list[dict[str, Any]] = [{"role": "user", "content": [task]}]
    for n, extra in enumerate([[old_window], [plan], [new_window], [], []], start=1):
        messages.append(
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"path": f"f{n}"}}
            ]}
        )
        result = {"type": "tool_result", "tool_use_id": f"t{n}", "content": big}
        messages.append({"role": "user", "content": [result, *extra]})
    assert compact(messages, 0, keep_recent=2) == 4
    roles = [m["role"] for m in messages]
    assert roles == ["user"] + ["assistant", "user"] * 5
    kept = [b for m in messages for b in m["content"] if b.get("devloop_region")]
    assert kept == [plan, new_window]
    assert messages[1]["content"][0]["text"] == "[turn 1, summarised] Read f1"
    assert messages[2]["content"][0]["text"] == "[turn 1 results] ok"
    assert messages[-1]["content"][0]["content"] == big  # the newest pair is whole


def transcript(outputs: list[int]) -> list[dict[str, Any]]:
    """The task, then one Read turn per output size (in bytes of tool output)."""
    task = {"type": "text", "text": "task"}
    messages: list[dict[str, Any]] = [{"role": "user", "content": [task]}]
    for n, size in enumerate(outputs, start=1):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"t{n}", "name": "Read", "input": {"path": f"f{n}"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"t{n}", "content": str(n) * size}]})
    return messages


def cleared(messages: list[dict[str, Any]]) -> list[str]:
    return [b["tool_use_id"] for m in messages for b in m["content"]
            if b.get("type") == "tool_result" and b["content"].startswith("[cleared")]


def test_tool_outputs_are_cleared_only_when_digests_are_not_enough() -> None:
    # Digesting the two old turns is enough: nothing is cleared.
    enough = transcript([8000, 8000, 400, 400, 400])
    assert fit(enough, budget_tokens=2000, keep_recent=6) == 2
    assert approx_tokens(enough) <= 2000 and cleared(enough) == []
    # The newest turns alone are over the budget: their outputs are cleared, oldest first,
    # until it fits; the last one is kept whole, and every turn is still a pair.
    big = transcript([8000, 8000, 4000, 4000, 4000])
    assert fit(big, budget_tokens=2000, keep_recent=6) == 2
    assert approx_tokens(big) <= 2000
    assert cleared(big) == ["t3", "t4"]
    assert big[-1]["content"][0]["content"] == "5" * 4000
    assert [m["role"] for m in big] == ["user"] + ["assistant", "user"] * 5
