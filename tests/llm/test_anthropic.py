"""AnthropicProvider over the real anthropic SDK against the stub server (no mocks, no network)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devloop.llm.anthropic import (
    NON_STREAMING_MAX_TOKENS,
    AnthropicProvider,
    error_class,
    parse_retry_after,
    with_breakpoints,
)
from devloop.llm.base import (
    DEFAULT_PRICES,
    LLMAuthError,
    LLMBadRequest,
    LLMConnectionError,
    LLMError,
    LLMOverloaded,
    LLMRateLimited,
    LLMServerError,
    LLMTransient,
    LLMUnpriced,
    estimate_cost,
)
from devloop.llm.stub import StubServer

from .conftest import MODEL, Sleeps, make_request

Start = Callable[..., StubServer]
Provider = Callable[..., AnthropicProvider]

READ_TURN = {
    "content": [
        {"text": "Let me read the spec first."},
        {"tool_use": {"name": "Read", "input": {"path": "spec.json"}}},
    ]
}


def test_json_response_parses_into_llm_response(stub_server: Start, provider_for: Provider) -> None:
    stub = stub_server({"sessions": {"coder.*": {"turns": {1: READ_TURN}}}})
    response = provider_for(stub).complete(make_request())

    assert response.stop_reason == "tool_use"
    assert response.content[0] == {"type": "text", "text": "Let me read the spec first."}
    call = response.content[1]
    assert call["type"] == "tool_use" and call["id"].startswith("toolu_")
    assert (call["name"], call["input"]) == ("Read", {"path": "spec.json"})
    assert response.model == MODEL
    assert response.request_id and response.request_id.startswith("req_stub_")
    assert response.usage.output_tokens > 0 and response.usage.prompt_tokens > 0
    assert response.attempts == 1
    assert stub.requests[0].body.get("stream") is None


def test_large_max_tokens_streams_and_parses_the_same(
    stub_server: Start, provider_for: Provider
) -> None:
    long_text = "word " * 100
    turn = {"content": [{"text": long_text}, READ_TURN["content"][1]]}
    stub = stub_server({"default": turn})
    provider = provider_for(stub)

    streamed = provider.complete(make_request(max_tokens=NON_STREAMING_MAX_TOKENS + 1))
    plain = provider.complete(make_request(max_tokens=NON_STREAMING_MAX_TOKENS))

    assert stub.requests[0].body["stream"] is True
    assert "stream" not in stub.requests[1].body
    assert streamed.content == plain.content
    assert streamed.content[0]["text"] == long_text
    assert streamed.content[1]["input"] == {"path": "spec.json"}
    assert streamed.stop_reason == plain.stop_reason == "tool_use"
    assert streamed.usage.output_tokens == plain.usage.output_tokens
    assert streamed.request_id and streamed.request_id.startswith("req_stub_")


def test_session_key_travels_as_metadata_user_id(
    stub_server: Start, provider_for: Provider
) -> None:
    stub = stub_server({"default": {"content": [{"text": "ok"}]}})
    provider_for(stub).complete(make_request("tester.p1.todo-fe"))
    assert stub.requests[0].body["metadata"] == {"user_id": "tester.p1.todo-fe"}


def test_breakpoints_on_system_and_last_block_without_touching_the_callers_messages() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Implement the unit."},
        {"role": "assistant", "content": [{"type": "text", "text": "Reading."}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    before = copy.deepcopy(messages)
    params = with_breakpoints(make_request(messages=messages))

    assert params["system"][0]["cache_control"] == {"type": "ephemeral"}
    last = params["messages"][-1]["content"]
    assert last[-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in last[0]
    assert params["messages"][0]["content"] == "Implement the unit."
    assert messages == before


def test_string_last_message_becomes_a_marked_text_block() -> None:
    params = with_breakpoints(make_request())
    assert params["messages"][-1]["content"] == [
        {"type": "text", "text": "Implement the unit.", "cache_control": {"type": "ephemeral"}}
    ]


@pytest.mark.parametrize(
    "stop_reason", ["max_tokens", "refusal", "pause_turn", "model_context_window_exceeded"]
)
def test_every_stop_reason_is_returned_for_the_runtime_to_decide(
    stub_server: Start, provider_for: Provider, stop_reason: str
) -> None:
    stub = stub_server({"default": {"content": [{"text": "partial"}], "stop_reason": stop_reason}})
    assert provider_for(stub).complete(make_request()).stop_reason == stop_reason


def test_stop_sequence_is_returned(stub_server: Start, provider_for: Provider) -> None:
    turn = {"content": [{"text": "up to"}], "stop_reason": "stop_sequence", "stop_sequence": "END"}
    stub = stub_server({"default": turn})
    assert provider_for(stub).complete(make_request()).stop_reason == "stop_sequence"


@pytest.mark.parametrize("kind", ["rate_limit", "overloaded", "server_error", "drop"])
@pytest.mark.parametrize("streaming", [False, True])
def test_transient_faults_are_survived_by_retries_and_counted(
    stub_server: Start, provider_for: Provider, sleeps: Sleeps, kind: str, streaming: bool
) -> None:
    turn = {**READ_TURN, "fault": {"kind": kind, "times": 2}}
    stub = stub_server({"default": turn})
    max_tokens = NON_STREAMING_MAX_TOKENS + 1 if streaming else 1024
    provider = provider_for(stub, base_delay_s=0, max_delay_s=0)

    response = provider.complete(make_request(max_tokens=max_tokens))

    assert response.attempts == 3
    assert response.content[1]["name"] == "Read"
    assert [r.fault for r in stub.requests] == [kind, kind, None]
    assert len(sleeps) == 2


@pytest.mark.parametrize(
    ("kind", "error", "status"),
    [
        ("rate_limit", LLMRateLimited, 429),
        ("overloaded", LLMOverloaded, 529),
        ("server_error", LLMServerError, 500),
        ("drop", LLMConnectionError, None),
    ],
)
def test_exhausted_retries_raise_the_typed_error(
    stub_server: Start,
    provider_for: Provider,
    kind: str,
    error: type[LLMError],
    status: int | None,
) -> None:
    stub = stub_server({"default": {**READ_TURN, "fault": {"kind": kind, "times": 99}}})
    provider = provider_for(stub, max_retries=2, base_delay_s=0, max_delay_s=0)

    with pytest.raises(error) as caught:
        provider.complete(make_request("coder.p1.unit-x"))

    assert isinstance(caught.value, LLMTransient)
    assert caught.value.attempts == 3 and len(stub.requests) == 3
    assert caught.value.status == status
    assert caught.value.session_key == "coder.p1.unit-x"
    assert "coder.p1.unit-x" in str(caught.value)


def test_retry_after_from_the_server_is_honoured(
    stub_server: Start, provider_for: Provider, sleeps: Sleeps
) -> None:
    fault = {"kind": "rate_limit", "times": 2, "retry_after": 0.25}
    stub = stub_server({"default": {**READ_TURN, "fault": fault}})
    provider_for(stub, base_delay_s=5, max_delay_s=5).complete(make_request())
    assert sleeps == [0.25, 0.25]
    assert stub.requests[0].status == 429


def test_backoff_without_retry_after_grows_exponentially_with_jitter(
    stub_server: Start, provider_for: Provider, sleeps: Sleeps
) -> None:
    stub = stub_server({"default": {**READ_TURN, "fault": {"kind": "server_error", "times": 3}}})
    provider_for(stub, base_delay_s=1, max_delay_s=3).complete(make_request())
    first, second, third = sleeps
    assert 0.5 <= first <= 1 and 1 <= second <= 2 and 1.5 <= third <= 3


def test_parse_retry_after_prefers_milliseconds() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({}) is None
    in_past = parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})
    assert in_past is not None and in_past < 0


def test_malformed_tool_input_reaches_the_caller_as_content(
    stub_server: Start, provider_for: Provider
) -> None:
    turn = {**READ_TURN, "fault": "malformed_tool_input"}
    stub = stub_server({"default": turn})
    response = provider_for(stub).complete(make_request())

    call = response.content[1]
    assert call["name"] == "Read" and response.stop_reason == "tool_use"
    assert "path" not in call["input"] or not isinstance(call["input"]["path"], str)
    served = stub.requests[0]
    assert served.status == 200 and served.fault == "malformed_tool_input"


def test_unknown_tool_reaches_the_caller_as_content(
    stub_server: Start, provider_for: Provider
) -> None:
    stub = stub_server({"default": {**READ_TURN, "fault": "unknown_tool"}})
    response = provider_for(stub).complete(make_request())

    call = response.content[1]
    assert call["type"] == "tool_use" and call["name"] not in {"Read"}
    assert call["input"] == {"path": "spec.json"}
    assert response.stop_reason == "tool_use"


def test_more_than_four_breakpoints_is_a_bad_request_not_retried(
    stub_server: Start, provider_for: Provider
) -> None:
    # Three marked blocks of the caller's + system + the moving last-message breakpoint = 5.
    marked = {"type": "ephemeral"}
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"part {i}", "cache_control": marked} for i in range(3)
            ]
            + [{"type": "text", "text": "go"}],
        },
    ]
    stub = stub_server({"default": READ_TURN})

    with pytest.raises(LLMBadRequest) as caught:
        provider_for(stub).complete(make_request(messages=messages))

    assert caught.value.status == 400 and caught.value.attempts == 1
    assert "maximum of 4" in str(caught.value)
    assert len(stub.requests) == 1


def test_wrong_key_is_an_auth_error(stub_server: Start, provider_for: Provider) -> None:
    stub = stub_server({"default": READ_TURN}, api_key="the-right-key")
    with pytest.raises(LLMAuthError) as caught:
        provider_for(stub, api_key="a-wrong-key").complete(make_request())
    assert caught.value.status == 401


def test_api_key_and_base_url_come_from_the_environment(
    stub_server: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = stub_server({"default": READ_TURN}, api_key="env-key")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", stub.base_url)
    assert AnthropicProvider().complete(make_request()).stop_reason == "tool_use"


@pytest.mark.parametrize("config_dir", ["empty", "absent"])
def test_missing_credentials_say_what_to_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, config_dir: str
) -> None:
    for name in (
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_PROFILE",
        "ANTHROPIC_IDENTITY_TOKEN",
        "ANTHROPIC_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    # An empty config dir makes the SDK raise at construction; an absent one, at the call.
    monkeypatch.setenv(
        "ANTHROPIC_CONFIG_DIR", str(tmp_path / ("" if config_dir == "empty" else "x"))
    )
    provider = AnthropicProvider(base_url="http://127.0.0.1:9")
    with pytest.raises(LLMAuthError, match="set ANTHROPIC_API_KEY"):
        provider.complete(make_request())


def test_a_turn_missing_from_the_script_is_a_bad_request_naming_it(
    stub_server: Start, provider_for: Provider
) -> None:
    stub = stub_server({"sessions": {"coder.*": {"turns": {2: READ_TURN}}}})
    with pytest.raises(LLMBadRequest, match="no turn 1 for session 'coder.p1.todo-be'"):
        provider_for(stub).complete(make_request())


def test_temperature_is_not_sent_because_the_api_rejects_it(
    stub_server: Start, provider_for: Provider
) -> None:
    stub = stub_server({"default": READ_TURN})
    provider_for(stub).complete(make_request(temperature=0.2))
    assert "temperature" not in stub.requests[0].body


def _tool_results(content: list[dict[str, Any]], output: str) -> dict[str, Any]:
    results = [
        {"type": "tool_result", "tool_use_id": b["id"], "content": output}
        for b in content
        if b["type"] == "tool_use"
    ]
    return {"role": "user", "content": results}


def test_five_turn_conversation_reads_a_growing_share_from_the_cache(
    stub_server: Start, provider_for: Provider
) -> None:
    turns = {n: READ_TURN for n in range(1, 5)}
    turns[5] = {"content": [{"text": "Done: the unit is implemented."}]}
    stub = stub_server({"sessions": {"coder.*": {"turns": turns}}})
    provider = provider_for(stub)
    system = "You are the coder. " + "Follow the conventions of the project. " * 40
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Implement the unit."}]

    shares = []
    for turn in range(1, 6):
        response = provider.complete(make_request(system=system, messages=messages))
        usage = response.usage
        if turn == 1:
            assert usage.cache_read_input_tokens == 0 and usage.cache_creation_input_tokens > 0
        else:
            assert usage.cache_read_input_tokens > 0
        shares.append(usage.cache_read_input_tokens / usage.prompt_tokens)
        messages.append({"role": "assistant", "content": response.content})
        if response.stop_reason == "tool_use":
            messages.append(_tool_results(response.content, "file contents line\n" * 20))

    assert response.stop_reason == "end_turn"
    assert shares[1] < shares[2] < shares[3] < shares[4]
    assert [r.turn for r in stub.requests] == [1, 2, 3, 4, 5]


def test_cost_comes_from_the_price_table(
    stub_server: Start, provider_for: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEVLOOP_PRICES_JSON", raising=False)
    stub = stub_server({"default": READ_TURN})
    response = provider_for(stub).complete(make_request())
    u = response.usage
    sonnet = DEFAULT_PRICES[MODEL]
    expected = (
        u.input_tokens * 3
        + u.output_tokens * 15
        + u.cache_creation_input_tokens * 3.75
        + u.cache_read_input_tokens * 0.30
    ) / 1e6
    assert (sonnet.input, sonnet.output, sonnet.cache_write, sonnet.cache_read) == (
        3,
        15,
        3.75,
        0.3,
    )
    assert response.cost_usd == pytest.approx(expected) and response.cost_usd > 0
    assert response.cost_usd == pytest.approx(estimate_cost(MODEL, u, DEFAULT_PRICES))


def test_a_proxy_answering_with_another_model_id_is_priced_as_asked(
    stub_server: Start, provider_for: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEVLOOP_PRICES_JSON", raising=False)
    # The answer claims a model with no price: costed by it, the turn would be free.
    stub = stub_server({"default": READ_TURN, "answer_model": "claude-3-7-sonnet-latest"})
    response = provider_for(stub).complete(make_request())
    assert response.model == "claude-3-7-sonnet-latest"
    assert response.cost_usd == pytest.approx(estimate_cost(MODEL, response.usage,
                                                            DEFAULT_PRICES))
    assert response.cost_usd > 0


def test_a_model_without_a_price_is_refused_before_any_request_is_sent(
    stub_server: Start, provider_for: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEVLOOP_PRICES_JSON", raising=False)
    stub = stub_server({"default": READ_TURN})
    with pytest.raises(LLMUnpriced, match="DEVLOOP_PRICES_JSON") as refused:
        provider_for(stub).complete(make_request(model="claude-3-7-sonnet-latest"))
    assert "spend caps" in str(refused.value)
    assert stub.requests == []


@pytest.mark.parametrize(
    ("status", "error_type", "expected"),
    [
        (429, "rate_limit_error", LLMRateLimited),
        (529, "overloaded_error", LLMOverloaded),
        (503, "api_error", LLMServerError),
        (408, None, LLMServerError),
        (409, None, LLMServerError),
        (400, "invalid_request_error", LLMBadRequest),
        (413, "request_too_large", LLMBadRequest),
        (401, "authentication_error", LLMAuthError),
        (403, "permission_error", LLMAuthError),
        (None, "overloaded_error", LLMOverloaded),  # an error event inside a 200 stream
        (None, "something_new", LLMError),
    ],
)
def test_status_and_error_type_map_to_our_errors(
    status: int | None, error_type: str | None, expected: type[LLMError]
) -> None:
    assert error_class(status, error_type) is expected
