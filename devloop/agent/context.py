"""Context regions and budgeting over a transcript. Pure.

The transcript is the message list the model sees. Some of it is pinned and never
leaves: the first user message (the task and its data), and text blocks marked with a
region (`devloop_region`): the reassess plans and the newest `errors` window. When the
transcript grows past its budget, the oldest turns are compacted in bulk, down to a low
water mark, so the cached prefix stays the same for many turns between compactions: each
old (assistant, user) pair becomes a one-line digest of its tool calls and one of their
outcomes. A pair stays a pair, so turns still alternate and still count (the stub
server numbers turns by the assistant messages). Only when digests are not enough are
the newest tool outputs cleared to stubs.
"""

from __future__ import annotations

import json
from typing import Any

from devloop.agent.untrusted import wrap_untrusted

REGION = "devloop_region"
COMPACTED = "devloop_compacted"
LOW_WATER = 0.6  # compact down to this share of the budget
KEEP_RECENT = 6  # the newest messages are never compacted
ARGS_CHARS = 80
OUTCOME_CHARS = 120


def approx_tokens(value: Any) -> int:
    """About one token per 4 bytes of JSON: the same rule the stub server documents."""
    return (len(json.dumps(value, ensure_ascii=False).encode()) + 3) // 4


def region_block(region: str, text: str) -> dict[str, Any]:
    """A text block of a pinned region (`errors`, `plan`)."""
    return {"type": "text", "text": text, REGION: region}


def fit(messages: list[dict[str, Any]], budget_tokens: int, keep_recent: int = KEEP_RECENT) -> int:
    """Make the transcript fit its budget; returns how many turns were compacted.

    Nothing happens under the budget. Over it, the oldest turns are compacted until the
    transcript is under LOW_WATER of the budget (or only the newest are left); then, if
    it still does not fit, the newest tool outputs are cleared.
    """
    if approx_tokens(messages) <= budget_tokens:
        return 0
    compacted = compact(messages, int(budget_tokens * LOW_WATER), keep_recent)
    if approx_tokens(messages) > budget_tokens:
        clear_old_tool_outputs(messages, budget_tokens, keep_recent=1)
    return compacted


def compact(messages: list[dict[str, Any]], target_tokens: int, keep_recent: int) -> int:
    """Digest the oldest (assistant, user) pairs until the transcript is under target."""
    total = approx_tokens(messages)
    latest_errors = _latest_region(messages, "errors")
    compacted = 0
    # messages[0] is the task; after it, assistant and user messages alternate.
    last = len(messages) - keep_recent
    for i in range(1, last - 1, 2):
        if total <= target_tokens:
            break
        turn, results = messages[i], messages[i + 1]
        if turn.get(COMPACTED) or turn.get("role") != "assistant" or results.get("role") != "user":
            continue
        before = approx_tokens(turn) + approx_tokens(results)
        number = (i + 1) // 2
        messages[i] = {
            "role": "assistant",
            "content": [{"type": "text", "text": _call_digest(number, turn["content"])}],
            COMPACTED: True,
        }
        kept = [
            b
            for b in results["content"]
            if isinstance(b, dict)
            and b.get(REGION)
            and (b[REGION] != "errors" or b is latest_errors)
        ]
        messages[i + 1] = {
            "role": "user",
            "content": [
                {"type": "text", "text": _outcome_digest(number, results["content"])},
                *kept,
            ],
            COMPACTED: True,
        }
        total += approx_tokens(messages[i]) + approx_tokens(messages[i + 1]) - before
        compacted += 1
    return compacted


def _latest_region(messages: list[dict[str, Any]], region: str) -> dict[str, Any] | None:
    """The newest block of a region, or None."""
    for message in reversed(messages):
        for block in reversed(message.get("content") or []):
            if isinstance(block, dict) and block.get(REGION) == region:
                return block
    return None


def _call_digest(number: int, content: list[Any]) -> str:
    """`[turn 7, summarised] Read spec.json; Edit code/a.py` from an assistant turn."""
    parts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_use":
            parts.append(f"{block.get('name')} {_args(block.get('input'))}".strip())
        elif block.get("type") == "text" and block.get("text", "").strip():
            parts.append("said: " + _short(block["text"], ARGS_CHARS))
    return f"[turn {number}, summarised] " + ("; ".join(parts) or "(no content)")


def _args(value: Any) -> str:
    """The argument that says what a call was about: a path or a command, else its JSON."""
    if not isinstance(value, dict):
        return ""
    for key in ("path", "command", "kind", "id"):
        if isinstance(value.get(key), str):
            return _short(value[key], ARGS_CHARS)
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return _short(text, ARGS_CHARS) if text != "{}" else ""


def _short(text: str, limit: int) -> str:
    """One line of at most `limit` characters, with no fence characters in it."""
    line = " ".join(text.replace("|", " ").replace("`", "'").split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _outcome_digest(number: int, content: list[Any]) -> str:
    """`[turn 7 results] ok, error 1` and, fenced (they quote tool output), the first line
    of each error and of each runtime note: `1: code/a.py: old was not found`."""
    marks: list[str] = []
    quoted: list[str] = []
    for block in content:
        if not isinstance(block, dict) or block.get(REGION):
            continue
        if block.get("type") == "tool_result" and not block.get("is_error"):
            marks.append("ok")
        elif block.get("type") in ("tool_result", "text"):
            body = block.get("content") if block.get("type") == "tool_result" else block["text"]
            text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
            lines = [ln for ln in text.splitlines() if ln.strip() and not _fence(ln)]
            kind = "error" if block.get("type") == "tool_result" else "note"
            marks.append(f"{kind} {len(quoted) + 1}")
            quoted.append(f"{len(quoted) + 1}: " + _short(lines[0] if lines else "", OUTCOME_CHARS))
    head = f"[turn {number} results] " + (", ".join(marks) or "none")
    if not quoted:
        return head
    return head + "\n" + wrap_untrusted("summarised tool results", "\n".join(quoted))


def _fence(line: str) -> bool:
    """A line of the untrusted-data fence itself, which says nothing about the outcome."""
    return line.startswith("[untrusted data:") or line.strip() == "|||"


def clear_old_tool_outputs(
    messages: list[dict[str, Any]], budget_tokens: int, keep_recent: int = 4
) -> int:
    """Stub the oldest tool results until the transcript fits; returns how many were cleared.

    The newest `keep_recent` messages and region blocks are never touched.
    """
    cleared = 0
    total = approx_tokens(messages)
    for message in messages[: max(0, len(messages) - keep_recent)]:
        if total <= budget_tokens:
            break
        if message.get("role") != "user":
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
