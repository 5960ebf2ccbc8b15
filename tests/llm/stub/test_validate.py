"""The 400s the stub gives where the real API would."""

from __future__ import annotations

from typing import Any

import pytest

from devloop.llm.stub.validate import request_problem

CALL = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
RESULT = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}


def _body(*messages: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": list(messages), **extra}


def test_a_well_formed_tool_exchange_passes() -> None:
    body = _body(
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [CALL]},
        {"role": "user", "content": [RESULT]},
    )
    assert request_problem(body) is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}, "model: Field"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        (_body(), "at least one message"),
        (_body({"role": "system", "content": "x"}), "messages.0.role"),
        (_body({"role": "user", "content": [{"type": "text", "text": ""}]}), "non-empty"),
        (_body({"role": "user", "content": []}), "messages.0: all messages must have"),
        (
            _body(
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [CALL]},
                {"role": "user", "content": "what?"},
            ),
            "messages.2: `tool_use` ids were found",
        ),
        (_body({"role": "user", "content": [RESULT]}), "unexpected `tool_use_id`"),
        (_body({"role": "user", "content": "x"}, tools=[{"name": "T"}]), "tools.0"),
    ],
)
def test_what_the_api_rejects(body: dict[str, Any], expected: str) -> None:
    problem = request_problem(body)
    assert problem is not None and expected in problem


def test_an_empty_final_assistant_message_is_allowed() -> None:
    body = _body({"role": "user", "content": "go"}, {"role": "assistant", "content": []})
    assert request_problem(body) is None


def test_sampling_parameters_are_refused_only_from_api_version_2026_10_21() -> None:
    body = _body({"role": "user", "content": "go"}, top_p=0.9)
    assert request_problem(body, api_version="2023-06-01") is None
    assert (
        request_problem(body, api_version="2026-10-21") == "top_p: Extra inputs are not permitted"
    )


def test_count_tokens_needs_no_max_tokens() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    assert request_problem(body, needs_max_tokens=False) is None
