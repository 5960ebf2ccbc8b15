"""Context budgeting: clear old tool outputs to one-line stubs; pinned messages stay. Pure."""

from __future__ import annotations

import json
from typing import Any

PINNED = "devloop_pinned"


def approx_tokens(value: Any) -> int:
    """About one token per 4 bytes of JSON: the same rule the stub server documents."""
    return (len(json.dumps(value, ensure_ascii=False).encode()) + 3) // 4


def clear_old_tool_outputs(
    messages: list[dict[str, Any]], budget_tokens: int, keep_recent: int = 4
) -> int:
    """Stub the oldest tool results until the transcript fits; returns how many were cleared.

    The newest `keep_recent` messages and any message marked pinned are never touched.
    """
    cleared = 0
    total = approx_tokens(messages)
    for message in messages[: max(0, len(messages) - keep_recent)]:
        if total <= budget_tokens:
            break
        if message.get(PINNED) or message.get("role") != "user":
            continue
        for block in message.get("content", []):
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            if block.get("devloop_cleared"):
                continue
            before = approx_tokens(block.get("content"))
            block["content"] = (
                f"[cleared to save context: an earlier tool output of about {before} tokens; "
                "run the tool again if you need it]"
            )
            block["devloop_cleared"] = True
            total -= before
            cleared += 1
    return cleared


def for_api(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript without DevLoop's bookkeeping keys, as the Messages API expects."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            content = [
                {k: v for k, v in b.items() if not k.startswith("devloop_")}
                if isinstance(b, dict)
                else b
                for b in content
            ]
        out.append({"role": message["role"], "content": content})
    return out
