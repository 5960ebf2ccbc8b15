"""The stub over HTTP, driven by the unmodified anthropic client (and raw httpx2 for headers)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import pytest

from devloop.llm.stub import StubServer, serve_forever
from devloop.llm.stub.tokens import total_tokens

Start = Callable[..., StubServer]
MODEL = "claude-sonnet-4-6"
TOOLS = [
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]
READ = {"tool_use": {"name": "Read", "input": {"path": "spec.json"}}}


def _client(stub: StubServer, **kwargs: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="test-key", base_url=stub.base_url, max_retries=0, **kwargs)


def _create(client: anthropic.Anthropic, messages: list[Any], **kw: Any) -> Any:
    params: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 256,
        "tools": TOOLS,
        "messages": messages,
        "metadata": {"user_id": kw.pop("session", "coder.p1.be")},
    }
    return client.messages.create(**params, **kw)


USER: list[Any] = [{"role": "user", "content": "go"}]


def test_stream_events_come_in_the_order_the_sdk_accumulates(stub_server: Start) -> None:
    stub = stub_server({"default": {"content": [{"text": "x" * 100}, READ]}})
    events = list(_create(_client(stub), USER, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 2
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert "text_delta" in deltas and "input_json_delta" in deltas
    assert stub.requests[0].headers["content-type"] == "application/json"
    assert stub.requests[0].body["stream"] is True



def test_each_answered_request_keeps_the_usage_it_answered_with(stub_server: Start) -> None:
    # bench/unit_cost.py reads a run's tokens per request from here.
    stub = stub_server({"default": {"content": [{"text": "x" * 100}]}})
    answer = _create(_client(stub), USER)
    assert stub.requests[0].usage == answer.usage.model_dump(
        include={"input_tokens", "output_tokens", "cache_creation_input_tokens",
                 "cache_read_input_tokens"}) and answer.usage.output_tokens == 25

def test_a_stub_keeps_bodies_and_headers_only_when_asked(stub_server: Start) -> None:
    # A long run sends gigabytes of transcripts: by default only what was asked and answered.
    script = {"default": {"content": [{"text": "hi"}]}}
    lean, full = stub_server(script, record_bodies=False), stub_server(script, record_bodies=True)
    for stub in (lean, full):
        _create(_client(stub), USER, session="coder.p1.be")
    [kept] = lean.requests
    assert (kept.body, kept.headers) == (None, {})
    assert (kept.path, kept.session_key, kept.turn, kept.status) == (
        "/v1/messages", "coder.p1.be", 1, 200)
    assert kept.usage == full.requests[0].usage and kept.usage is not None
    assert full.requests[0].body["metadata"] == {"user_id": "coder.p1.be"}
    assert full.requests[0].headers["content-type"] == "application/json"
    assert StubServer(script).app.record_bodies is False  # the default


def test_a_template_turn_its_values_do_not_make_is_a_400_naming_the_field(
    stub_server: Start,
) -> None:
    script = {
        "templates": {"coder.{unit}": {"default": {"content": [{"text": "{{unit}}"}],
                                                   "latency_ms": "{{wait}}"}}},
        "units": {"fine": {"wait": 0}, "odd": {"wait": "soon"}},
    }
    stub = stub_server(script)
    client = _client(stub)
    assert _create(client, USER, session="coder.fine").content[0].text == "fine"
    with pytest.raises(anthropic.BadRequestError) as caught:
        _create(client, USER, session="coder.odd")
    assert 'templates."coder.{unit}".default.latency_ms: Input should be a valid integer' in str(
        caught.value)


def test_count_tokens_answers_the_total_of_the_prompt(stub_server: Start) -> None:
    stub = stub_server({"default": {"content": [{"text": "hi"}]}})
    counted = _client(stub).messages.count_tokens(model=MODEL, system="be brief", messages=USER)
    assert counted.input_tokens == total_tokens({"system": "be brief", "messages": USER}) > 0
    assert stub.requests[0].path == "/v1/messages/count_tokens"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"x-api-key": "k"}, 200),
        ({"authorization": "Bearer k"}, 200),
        ({}, 401),
        ({"authorization": "Basic k"}, 401),
    ],
)
def test_auth_by_x_api_key_or_bearer(
    stub_server: Start, headers: dict[str, str], status: int
) -> None:
    stub = stub_server({"default": {"content": [{"text": "hi"}]}})
    body = {"model": MODEL, "max_tokens": 10, "messages": USER}
    response = httpx2.post(f"{stub.base_url}/v1/messages", json=body, headers=headers)
    assert response.status_code == status
    if status == 401:
        assert response.json()["error"]["type"] == "authentication_error"


def test_the_turn_comes_from_the_transcript_so_a_resume_gets_the_same_turn(
    stub_server: Start,
) -> None:
    script = {
        "sessions": {
            "coder.*": {
                "turns": {
                    1: {"content": [READ]},
                    2: {"content": [READ]},
                    3: {"content": [{"text": "done"}]},
                }
            }
        }
    }
    stub = stub_server(script)
    client = _client(stub)
    first = _create(client, USER)
    answer = {"type": "tool_result", "tool_use_id": first.content[0].id, "content": "{}"}
    after_one = [
        *USER,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": [answer]},
    ]

    second = _create(client, after_one)
    resumed = _create(client, after_one)  # a client that crashed re-sends the same transcript

    assert [r.turn for r in stub.requests] == [1, 2, 2]
    assert second.content[0].id == resumed.content[0].id != first.content[0].id


def test_a_session_of_a_new_client_starts_at_turn_one(stub_server: Start) -> None:
    stub = stub_server({"sessions": {"a": {"turns": {1: {"content": [{"text": "one"}]}}}}})
    assert _create(_client(stub), USER, session="a").content[0].text == "one"
    assert _create(_client(stub), USER, session="a").content[0].text == "one"


def test_a_tool_use_without_its_result_is_rejected_like_the_api(stub_server: Start) -> None:
    stub = stub_server({"default": {"content": [{"text": "hi"}]}})
    call = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}}
    messages = [
        *USER,
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": "and?"},
    ]
    with pytest.raises(anthropic.BadRequestError, match="without `tool_result` blocks"):
        _create(_client(stub), messages)


def test_sampling_parameters_are_rejected_under_the_current_api_version(
    stub_server: Start,
) -> None:
    stub = stub_server({"default": {"content": [{"text": "hi"}]}})
    with pytest.raises(anthropic.BadRequestError, match="temperature: Extra inputs"):
        _create(_client(stub), USER, extra_body={"temperature": 0.5})


def test_latency_delays_the_answer(stub_server: Start) -> None:
    stub = stub_server({"default": {"content": [{"text": "hi"}], "latency_ms": 150}})
    started = time.monotonic()
    _create(_client(stub), USER)
    assert time.monotonic() - started >= 0.15


def test_a_kept_alive_connection_gets_each_answer_without_waiting_for_a_delayed_ack(
    stub_server: Start,
) -> None:
    stub = stub_server({"default": {"content": [{"text": "hi"}]}})
    client = _client(stub)
    _create(client, USER)  # the connection the next ones reuse
    took = []
    for _ in range(9):
        started = time.monotonic()
        _create(client, USER)
        took.append(time.monotonic() - started)
    # Answers come in a few ms; a body held back by Nagle's algorithm waits 40 ms or more,
    # every time: the quickest of nine tells it apart even on a machine a neighbour keeps busy.
    assert min(took) < 0.03, took


def test_faults_count_per_session_and_turn(stub_server: Start) -> None:
    stub = stub_server({"default": {"content": [{"text": "hi"}], "fault": "server_error"}})
    client = _client(stub)
    with pytest.raises(anthropic.InternalServerError):
        _create(client, USER, session="a")
    with pytest.raises(anthropic.InternalServerError):
        _create(client, USER, session="b")
    assert _create(client, USER, session="a").content[0].text == "hi"
    assert [(r.session_key, r.status) for r in stub.requests] == [
        ("a", 500),
        ("b", 500),
        ("a", 200),
    ]


def test_a_rate_limit_carries_retry_after(stub_server: Start) -> None:
    fault = {"kind": "rate_limit", "retry_after": 3}
    stub = stub_server({"default": {"content": [{"text": "hi"}], "fault": fault}})
    with pytest.raises(anthropic.RateLimitError) as caught:
        _create(_client(stub), USER)
    assert caught.value.response.headers["retry-after"] == "3"


def test_content_faults_without_a_scripted_tool_call_make_one(stub_server: Start) -> None:
    script = {
        "sessions": {
            "bad": {"default": {"content": [{"text": "hmm"}], "fault": "malformed_tool_input"}},
            "unknown": {"default": {"content": [{"text": "hmm"}], "fault": "unknown_tool"}},
        }
    }
    stub = stub_server(script)
    client = _client(stub)

    bad = _create(client, USER, session="bad")
    unknown = _create(client, USER, session="unknown")

    assert bad.stop_reason == unknown.stop_reason == "tool_use"
    assert bad.content[1].name == "Read" and bad.content[1].input == {"path": 12345}
    assert unknown.content[1].name == "no_such_tool"


def test_unknown_paths_are_404(stub_server: Start) -> None:
    stub = stub_server({})
    response = httpx2.post(f"{stub.base_url}/v1/complete", json={}, headers={"x-api-key": "k"})
    assert response.status_code == 404


def test_serve_forever_serves_a_script_file_until_stopped(tmp_path: Path) -> None:
    script = tmp_path / "stub.yaml"
    script.write_text("default:\n  content:\n    - text: from a file\n")
    ready: list[StubServer] = []
    thread = threading.Thread(
        target=serve_forever,
        args=(script, "127.0.0.1", 0),
        kwargs={"on_ready": ready.append},
        daemon=True,  # a failed start must not keep the test process alive
    )
    thread.start()
    deadline = time.monotonic() + 5
    while not ready and time.monotonic() < deadline:
        time.sleep(0.01)
    stub = ready[0]
    try:
        assert _create(_client(stub), USER).content[0].text == "from a file"
    finally:
        stub.stop()
        thread.join(timeout=5)
    assert not thread.is_alive()
