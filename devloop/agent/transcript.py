"""The transcript a session keeps: appending user blocks, answering dangling calls. Pure."""

from __future__ import annotations

from typing import Any

from devloop.agent.context import region_block


def identity(checkpoint: dict[str, Any]) -> tuple[int, int]:
    """(attempt, try) of a checkpoint; checkpoints from before tries were one try."""
    return int(checkpoint["attempt"]), int(checkpoint.get("try", 1))


def append_user_text(messages: list[dict[str, Any]], text: str, region: str | None = None) -> None:
    """Add a user text block, merging into a trailing user message (turns must alternate)."""
    block = region_block(region, text) if region else {"type": "text", "text": text}
    append_block(messages, block)


def append_block(messages: list[dict[str, Any]], block: dict[str, Any]) -> None:
    """Add a user block, merging into a trailing user message (turns must alternate)."""
    if messages and messages[-1]["role"] == "user":
        messages[-1]["content"].append(block)
    else:
        messages.append({"role": "user", "content": [block]})


def close_dangling(messages: list[dict[str, Any]]) -> None:
    """Answer tool calls an earlier attempt left unanswered (it ended mid-turn), so the
    transcript stays valid for the API."""
    if not messages or messages[-1]["role"] != "assistant":
        return
    calls = [b for b in messages[-1]["content"] if b.get("type") == "tool_use"]
    if calls:
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": b["id"],
                        "content": "not run: the attempt ended before this call",
                        "is_error": True,
                    }
                    for b in calls
                ],
            }
        )


def last_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last assistant turn that said anything."""
    for message in reversed(messages):
        if message["role"] == "assistant":
            text = " ".join(
                b.get("text", "") for b in message["content"] if b.get("type") == "text"
            )
            if text.strip():
                return text
    return ""
