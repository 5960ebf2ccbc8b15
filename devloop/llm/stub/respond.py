"""Turn a scripted Turn and the request into a Messages API response (JSON or SSE events)."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from typing import Any

from devloop.llm.stub.cache import CacheUsage
from devloop.llm.stub.tokens import block_tokens
from devloop.llm.stub.turn import Turn

log = logging.getLogger(__name__)

TEXT_CHUNK = 40  # characters per text_delta
JSON_CHUNK = 24  # characters per input_json_delta


def session_key_of(body: dict[str, Any]) -> str:
    """The session key: metadata.user_id, as AnthropicProvider sends it ("" when absent)."""
    metadata = body.get("metadata") or {}
    return str(metadata.get("user_id") or "") if isinstance(metadata, dict) else ""


def turn_number_of(body: dict[str, Any]) -> int:
    """Which turn a request asks for: its assistant messages + 1 (no server state)."""
    messages = body.get("messages") or []
    return 1 + sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")


def _digest(*parts: object) -> str:
    return hashlib.sha256("\x00".join(map(str, parts)).encode()).hexdigest()[:24]


def tool_use_id(session_key: str, turn: int, index: int) -> str:
    """A stable id, so a resumed client sees the same ids for the same turn."""
    return f"toolu_{_digest(session_key, turn, index)}"


def _wrong_value(prop: dict[str, Any]) -> Any:
    return 12345 if prop.get("type") == "string" else f"not a {prop.get('type')}"


def _violate(given: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """The scripted input made invalid: a required key missing and/or a wrong type."""
    bad = dict(given)
    props: dict[str, Any] = schema.get("properties") or {}
    required: list[str] = schema.get("required") or []
    if required:
        bad.pop(required[0], None)
    typed = next((name for name, p in props.items() if isinstance(p, dict) and "type" in p), None)
    if typed is not None:
        bad[typed] = _wrong_value(props[typed])
    if not required and typed is None:
        bad["__unexpected__"] = True
    return bad


def _apply_fault(content: list[dict[str, Any]], fault: str, tools: list[Any]) -> None:
    """Make the turn's first tool call malformed or name an unknown tool, in place."""
    names = [t.get("name") for t in tools if isinstance(t, dict)]
    call = next((b for b in content if b["type"] == "tool_use"), None)
    if call is None:
        if fault == "malformed_tool_input" and not names:
            log.warning("malformed_tool_input: the request has no tools to call; not applied")
            return
        call = {"type": "tool_use", "name": names[0] if names else "", "input": {}}
        content.append(call)
    if fault == "malformed_tool_input":
        tool = next((t for t in tools if isinstance(t, dict) and t.get("name") == call["name"]), {})
        call["input"] = _violate(call["input"], tool.get("input_schema") or {})
    else:
        unknown = "no_such_tool"
        while unknown in names:
            unknown += "_"
        call["name"] = unknown


def build_message(
    turn: Turn, body: dict[str, Any], session_key: str, turn_no: int, fault: str | None
) -> dict[str, Any]:
    """The assistant message for this turn; usage is filled in by `with_usage`."""
    content: list[dict[str, Any]] = []
    for block in turn.content:
        if block.tool_use is not None:
            call = block.tool_use
            content.append({"type": "tool_use", "name": call.name, "input": dict(call.input)})
        else:
            content.append({"type": "text", "text": block.text or ""})
    if fault in ("malformed_tool_input", "unknown_tool"):
        _apply_fault(content, fault, body.get("tools") or [])
    for i, out in enumerate(content):
        if out["type"] == "tool_use":
            # Rebuild so "id" comes first, as the API orders it.
            content[i] = {
                "type": "tool_use",
                "id": tool_use_id(session_key, turn_no, i),
                "name": out["name"],
                "input": out["input"],
            }
    has_tool_use = any(b["type"] == "tool_use" for b in content)
    return {
        "id": f"msg_{_digest(session_key, turn_no)}",
        "type": "message",
        "role": "assistant",
        "model": str(body.get("model", "")),
        "content": content,
        "stop_reason": turn.resolved_stop_reason(has_tool_use),
        "stop_sequence": turn.stop_sequence,
        "usage": {},
    }


def with_usage(message: dict[str, Any], cache: CacheUsage) -> dict[str, Any]:
    """Fill in usage: the cache split of the input, and the content's tokens as output."""
    output = max(1, sum(block_tokens(b) for b in message["content"]))
    message["usage"] = {
        "input_tokens": cache.input_tokens,
        "cache_creation_input_tokens": cache.cache_creation_input_tokens,
        "cache_read_input_tokens": cache.cache_read_input_tokens,
        "output_tokens": output,
    }
    return message


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse_events(message: dict[str, Any]) -> Iterator[bytes]:
    """The message as the event sequence the SDK's stream accumulator expects."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": 1},
    }
    yield _event("message_start", {"message": start})
    yield _event("ping", {})
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            yield _event(
                "content_block_start",
                {"index": index, "content_block": {"type": "text", "text": ""}},
            )
            for piece in _chunks(block["text"], TEXT_CHUNK):
                delta = {"type": "text_delta", "text": piece}
                yield _event("content_block_delta", {"index": index, "delta": delta})
        else:
            head = {**block, "input": {}}
            yield _event("content_block_start", {"index": index, "content_block": head})
            for piece in _chunks(json.dumps(block["input"]), JSON_CHUNK):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield _event("content_block_delta", {"index": index, "delta": delta})
        yield _event("content_block_stop", {"index": index})
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]}
    yield _event("message_delta", {"delta": delta, "usage": usage})
    yield _event("message_stop", {})
