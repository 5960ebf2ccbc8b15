"""Fixtures for the LLM layer: a stub server per test and providers pointed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.base import LLMRequest, ToolSpec
from devloop.llm.stub import StubServer

MODEL = "claude-sonnet-4-6"

READ_TOOL = ToolSpec(
    name="Read",
    description="Read a file of the unit.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["path"],
        "additionalProperties": False,
    },
)


def make_request(session_key: str = "coder.p1.todo-be", **overrides: Any) -> LLMRequest:
    """A small, valid request; overrides replace any field."""
    fields: dict[str, Any] = {
        "session_key": session_key,
        "system": "You are the coder. Write code that passes the tests.",
        "tools": [READ_TOOL],
        "messages": [{"role": "user", "content": "Implement the unit."}],
        "max_tokens": 1024,
        "model": MODEL,
    }
    fields.update(overrides)
    return LLMRequest(**fields)


@pytest.fixture
def stub_server() -> Iterator[Callable[..., StubServer]]:
    """Start stub servers from scripts; every one is stopped after the test."""
    started: list[StubServer] = []

    def start(script: dict[str, Any], **kwargs: Any) -> StubServer:
        server = StubServer(script, **{"record_bodies": True, **kwargs}).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


class Sleeps(list[float]):
    """Records the delays the provider asks for instead of sleeping through them."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    """A sleep function that only records."""
    return Sleeps()


@pytest.fixture
def provider_for(sleeps: Sleeps) -> Callable[..., AnthropicProvider]:
    """An AnthropicProvider on the real SDK, aimed at a stub, that never really sleeps."""

    def make(server: StubServer, **kwargs: Any) -> AnthropicProvider:
        kwargs.setdefault("api_key", "test-key")
        kwargs.setdefault("sleep", sleeps)
        return AnthropicProvider(base_url=server.base_url, **kwargs)

    return make
