"""The checks the real Messages API makes that an agent loop most often trips (400s)."""

from __future__ import annotations

from typing import Any

ROLES = ("user", "assistant")
SAMPLING = ("temperature", "top_p", "top_k")
NO_SAMPLING_SINCE = "2026-10-21"  # the API version from which sampling parameters are a 400


def _ids(content: Any, kind: str, key: str) -> list[str]:
    if not isinstance(content, list):
        return []
    return [str(b.get(key)) for b in content if isinstance(b, dict) and b.get("type") == kind]


def _message_problem(i: int, message: Any) -> str | None:
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        return f"messages.{i}.role: Input should be 'user' or 'assistant'"
    content = message.get("content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return f"messages.{i}.content: Input should be a string or a list of content blocks"
    for j, block in enumerate(content):
        if not isinstance(block, dict) or "type" not in block:
            return f"messages.{i}.content.{j}: a content block needs a `type`"
        if block["type"] == "text" and not block.get("text"):
            return f"messages.{i}.content.{j}.text: text content blocks must be non-empty"
    return None


def _pairing_problem(messages: list[Any]) -> str | None:
    # Every tool_use must be answered by a tool_result in the very next (user) message,
    # and every tool_result must answer a tool_use of the message just before it.
    for i, message in enumerate(messages):
        asked = (
            _ids(message.get("content"), "tool_use", "id") if message["role"] == "assistant" else []
        )
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        answered = _ids(nxt.get("content"), "tool_result", "tool_use_id") if nxt else []
        missing = [t for t in asked if t not in answered]
        if missing:
            return (
                f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        if message["role"] == "user":
            prev = messages[i - 1] if i > 0 else None
            before = _ids(prev.get("content"), "tool_use", "id") if prev else []
            stray = [
                t
                for t in _ids(message.get("content"), "tool_result", "tool_use_id")
                if t not in before
            ]
            if stray:
                return (
                    f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {', '.join(stray)}. Each `tool_result` block must have a "
                    "corresponding `tool_use` block in the previous message."
                )
    return None


def request_problem(
    body: Any, *, api_version: str = "", needs_max_tokens: bool = True
) -> str | None:
    """Why the real API would answer this body with 400 invalid_request_error, or None."""
    if not isinstance(body, dict):
        return "the request body must be a JSON object"
    if api_version >= NO_SAMPLING_SINCE:
        for name in SAMPLING:
            if name in body:
                return f"{name}: Extra inputs are not permitted"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if needs_max_tokens and (not isinstance(max_tokens, int) or max_tokens < 1):
        return "max_tokens: Field required (an integer >= 1)"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    for i, message in enumerate(messages):
        problem = _message_problem(i, message)
        if problem:
            return problem
        final_assistant = i == len(messages) - 1 and message["role"] == "assistant"
        if not message["content"] and not final_assistant:
            return (
                f"messages.{i}: all messages must have non-empty content except for the "
                "optional final assistant message"
            )
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    for k, tool in enumerate(tools):
        if not isinstance(tool, dict) or not tool.get("name") or "input_schema" not in tool:
            return f"tools.{k}: a tool needs `name` and `input_schema`"
    return _pairing_problem(messages)
