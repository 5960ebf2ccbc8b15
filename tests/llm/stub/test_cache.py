"""Prompt-cache accounting: writes at breakpoints, reads of exact prefixes, the 20-block walk."""

from __future__ import annotations

from typing import Any

import pytest

from devloop.llm.stub.cache import PromptCache, TooManyBreakpoints
from devloop.llm.stub.tokens import prefix_blocks, total_tokens

MARK = {"type": "ephemeral"}
TOOL = {"name": "Read", "description": "Read a file.", "input_schema": {"type": "object"}}
# Expected counts are worked out by hand from the stub's rule, ceil(UTF-8 bytes / 4), not
# taken from the code under test: the tool is "Read" + "Read a file." + '{"type":"object"}'
# = 4 + 12 + 17 = 33 bytes -> 9 tokens; the system prompt is 20 x "You are the coder. "
# = 380 bytes -> 95 tokens.
TOOL_TOKENS, SYSTEM_TOKENS = 9, 95


def _text(text: str, marked: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if marked:
        block["cache_control"] = MARK
    return block


def _body(user_blocks: list[dict[str, Any]], system_marked: bool = True) -> dict[str, Any]:
    return {
        "tools": [TOOL],
        "system": [_text("You are the coder. " * 20, marked=system_marked)],
        "messages": [{"role": "user", "content": user_blocks}],
    }


def test_first_request_writes_and_an_identical_one_reads_everything() -> None:
    cache = PromptCache()
    body = _body([_text("hello " * 10, marked=True)])
    total = TOOL_TOKENS + SYSTEM_TOKENS + 15  # 60 bytes of "hello " -> 15
    assert total_tokens(body) == total

    first = cache.account(prefix_blocks(body))
    second = cache.account(prefix_blocks(body))

    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens) == (total, 0)
    assert first.input_tokens == 0
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (0, total)


def test_tokens_after_the_last_breakpoint_are_plain_input() -> None:
    cache = PromptCache()
    body = _body([_text("question " * 10)])  # only the system prompt is marked
    usage = cache.account(prefix_blocks(body))
    assert usage.input_tokens == 23  # 90 bytes of "question " -> 22.5, rounded up
    assert usage.cache_creation_input_tokens == TOOL_TOKENS + SYSTEM_TOKENS


def test_a_moved_breakpoint_reads_what_the_previous_turn_wrote() -> None:
    cache = PromptCache()
    turn1 = [_text("first question", marked=True)]
    cache.account(prefix_blocks(_body(turn1)))
    turn2 = [_text("first question"), _text("second question", marked=True)]

    usage = cache.account(prefix_blocks(_body(turn2)))

    # turn 1 was tools + system + "first question" (14 bytes -> 4 tokens); only
    # "second question" (15 bytes -> 4 tokens) is new.
    assert usage.cache_read_input_tokens == TOOL_TOKENS + SYSTEM_TOKENS + 4
    assert usage.cache_creation_input_tokens == 4


def test_the_walk_back_stops_after_twenty_blocks() -> None:
    cache = PromptCache()
    cache.account(prefix_blocks(_body([_text("start", marked=True)], system_marked=False)))

    def later(extra: int) -> dict[str, Any]:
        blocks = [_text("start")] + [_text(f"block {i}") for i in range(extra)]
        blocks[-1]["cache_control"] = MARK
        return _body(blocks, system_marked=False)

    assert cache.account(prefix_blocks(later(20))).cache_read_input_tokens > 0
    cache.clear()
    cache.account(prefix_blocks(_body([_text("start", marked=True)], system_marked=False)))
    assert cache.account(prefix_blocks(later(21))).cache_read_input_tokens == 0


def test_the_marker_itself_is_not_part_of_the_prefix() -> None:
    cache = PromptCache()
    cache.account(prefix_blocks(_body([_text("same", marked=True)])))
    unmarked_system = _body([_text("same", marked=True)], system_marked=False)
    assert cache.account(prefix_blocks(unmarked_system)).cache_read_input_tokens > 0


def test_a_changed_system_prompt_misses() -> None:
    cache = PromptCache()
    cache.account(prefix_blocks(_body([_text("q", marked=True)])))
    other = _body([_text("q", marked=True)])
    other["system"][0]["text"] = "You are the tester."
    assert cache.account(prefix_blocks(other)).cache_read_input_tokens == 0


def test_more_than_four_breakpoints_is_refused() -> None:
    blocks = prefix_blocks(_body([_text(f"b{i}", marked=True) for i in range(4)]))
    with pytest.raises(TooManyBreakpoints, match="maximum of 4 blocks with cache_control"):
        PromptCache().account(blocks)


def test_prefixes_below_the_minimum_are_not_written() -> None:
    cache = PromptCache(min_tokens=10_000)
    body = _body([_text("q", marked=True)])
    assert cache.account(prefix_blocks(body)).cache_creation_input_tokens == 0
    again = cache.account(prefix_blocks(body))
    total = TOOL_TOKENS + SYSTEM_TOKENS + 1  # "q" -> 1
    assert again.cache_read_input_tokens == 0 and again.input_tokens == total


def test_top_level_cache_control_marks_the_last_block() -> None:
    body = _body([_text("q")], system_marked=False)
    body["cache_control"] = MARK
    marks = [b.breakpoint for b in prefix_blocks(body)]
    assert marks == [False, False, True]
