"""The documented token approximation: ceil(utf-8 bytes / 4) of each block's text."""

from __future__ import annotations

from devloop.llm.stub.tokens import block_tokens, count, prefix_blocks, total_tokens


def test_a_quarter_of_the_utf8_bytes_rounded_up() -> None:
    assert [count(""), count("abcd"), count("abcde"), count("é")] == [0, 1, 2, 1]


def test_tool_input_is_counted_as_canonical_json() -> None:
    a = {"type": "tool_use", "id": "x", "name": "Write", "input": {"b": 1, "a": "é"}}
    b = {"type": "tool_use", "id": "y", "name": "Write", "input": {"a": "é", "b": 1}}
    assert block_tokens(a) == block_tokens(b) == count('Write{"a":"é","b":1}')


def test_tool_results_count_their_text_and_definitions_their_schema() -> None:
    result = {
        "type": "tool_result",
        "tool_use_id": "t",
        "content": [{"type": "text", "text": "ok"}],
    }
    assert block_tokens(result) == count("ok")
    tool = {"name": "Read", "description": "d", "input_schema": {"type": "object"}}
    assert block_tokens(tool) == count('Readd{"type":"object"}')


def test_the_prefix_runs_tools_then_system_then_messages() -> None:
    body = {
        "tools": [{"name": "T", "description": "", "input_schema": {}}],
        "system": "sys",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
        ],
    }
    blocks = prefix_blocks(body)
    assert [b.key.split(",")[0] for b in blocks] == ['["tool"', '["system"', "[[0", "[[1"]
    assert total_tokens(body) == sum(b.tokens for b in blocks)
