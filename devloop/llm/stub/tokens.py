"""Token approximation and the prompt as a flat list of prefix blocks (tools, system, messages).

The stub counts `ceil(utf-8 bytes / 4)` of each block's text: a text block's text; a
tool_use's name plus its input as canonical JSON; a tool_result's text content; a tool
definition's name, description and canonical input schema; any other block its
canonical JSON. Canonical JSON is sorted keys, no spaces, non-ASCII kept.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any


def canonical(value: Any) -> str:
    """JSON with sorted keys and no whitespace, so equal values serialize equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def count(text: str) -> int:
    """Approximate tokens of text: a quarter of its UTF-8 bytes, rounded up."""
    return math.ceil(len(text.encode()) / 4)


def without_cache_control(block: dict[str, Any]) -> dict[str, Any]:
    """The block minus its cache_control marker (a marker does not change the prefix)."""
    return {k: v for k, v in block.items() if k != "cache_control"}


def block_text(block: Any) -> str:
    """The text a block is billed for (see the module docstring)."""
    if isinstance(block, str):
        return block
    if not isinstance(block, dict):
        return canonical(block)
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return str(block.get("name", "")) + canonical(block.get("input", {}))
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            return "".join(block_text(b) for b in content)
        return str(content)
    if "input_schema" in block:  # a tool definition
        return (
            str(block.get("name", ""))
            + str(block.get("description", ""))
            + canonical(block["input_schema"])
        )
    return canonical(without_cache_control(block))


def block_tokens(block: Any) -> int:
    """Approximate tokens of one block."""
    return count(block_text(block))


@dataclass(frozen=True)
class PrefixBlock:
    """One block of the prompt prefix: its identity for the cache, tokens, breakpoint flag."""

    key: str
    tokens: int
    breakpoint: bool


def _message_blocks(message: dict[str, Any]) -> list[Any]:
    content = message.get("content", [])
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def prefix_blocks(body: dict[str, Any]) -> list[PrefixBlock]:
    """The request's prompt in cache order: tools, then system, then message blocks."""
    out: list[PrefixBlock] = []

    def add(where: Any, block: Any) -> None:
        marked = isinstance(block, dict) and "cache_control" in block
        bare = without_cache_control(block) if isinstance(block, dict) else block
        # The key carries the block's place (tool/system/message index and role) so
        # equal text in different places is a different prefix.
        out.append(PrefixBlock(canonical([where, bare]), block_tokens(bare), marked))

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    if isinstance(system, str) and system:
        add("system", {"type": "text", "text": system})
    elif isinstance(system, list):
        for block in system:
            add("system", block)
    for i, message in enumerate(body.get("messages") or []):
        for block in _message_blocks(message):
            add([i, message.get("role")], block)
    if body.get("cache_control") and out:
        # Top-level cache_control (automatic caching) marks the last cacheable block.
        last = out[-1]
        out[-1] = PrefixBlock(last.key, last.tokens, True)
    return out


def total_tokens(body: dict[str, Any]) -> int:
    """Every input token of the request (what count_tokens answers)."""
    return sum(b.tokens for b in prefix_blocks(body))
