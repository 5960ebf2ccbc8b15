"""The relay's reader: a request as a model meets it. The first request of a session shows
its system prompt, tools and conversation; each later one only what is new since the
session's previous request (its system prompt or tools again only when they changed)."""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from devloop.llm.stub.relay.files import RelayDir
from devloop.llm.stub.tokens import total_tokens, without_cache_control

GUIDE = "docs/playing-the-model.md"


@dataclass
class RequestView:
    """What request `seq` shows the one playing the model."""

    seq: int
    session_key: str
    turn: int
    tokens: int  # the whole prompt, as the API would bill it uncached
    since: int | None  # the session's previous request (None: this is its first)
    system: str | None  # None: as request `since` showed it
    tools: list[dict[str, Any]] | None  # None: as request `since` showed them
    messages: list[dict[str, Any]]  # new since request `since` (all of them on a first)
    first_message: int  # where `messages` starts in the request's conversation
    note: str = ""
    calls: dict[str, str] = field(default_factory=dict)  # tool_use id -> "Name what"
    answered: bool = False

    def as_json(self) -> str:
        """The view as JSON (`devloop relay show --json`)."""
        return json.dumps(asdict(self), indent=1, ensure_ascii=False)


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content", [])
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [without_cache_control(b) for b in content if isinstance(b, dict)]


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Cache breakpoints move every turn; they are not part of what the model reads.
    return [{"role": m.get("role"), "content": _blocks(m)} for m in messages]


def _system(body: dict[str, Any]) -> str:
    system = body.get("system") or ""
    if isinstance(system, list):
        return "\n\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return str(system)


def _tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [without_cache_control(t) for t in body.get("tools") or [] if isinstance(t, dict)]


def _common(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _what(call: dict[str, Any]) -> str:
    """A tool call in a few words: its name and path, else its input, cut short."""
    given = call.get("input") or {}
    if isinstance(given, dict) and isinstance(given.get("path"), str):
        return f"{call.get('name')} {given['path']}"
    shown = json.dumps(given, ensure_ascii=False)
    return f"{call.get('name')} {shown if len(shown) <= 80 else shown[:77] + '...'}"


def view(relay: RelayDir, seq: int) -> RequestView:
    """Request `seq` as its reader shows it."""
    entry = relay.entry(seq)
    if entry is None:
        raise KeyError(f"{relay.root}: no request {seq}")
    body = relay.request(seq)
    messages = _plain(body.get("messages") or [])
    earlier = [e for e in relay.entries() if e.session_key == entry.session_key and e.seq < seq]
    calls = {b["id"]: _what(b) for m in messages for b in m["content"]
             if b.get("type") == "tool_use" and "id" in b}
    out = RequestView(seq, entry.session_key, entry.turn, total_tokens(body), None,
                      _system(body), _tools(body), messages, 0, calls=calls,
                      answered=relay.answer_path(seq).exists())
    if not earlier:
        return out
    before = earlier[-1].seq
    old = relay.request(before)
    seen = _plain(old.get("messages") or [])
    answer = relay.answer(before)
    if answer is not None:
        seen.append({"role": "assistant", "content": _blocks(answer)})
    start = _common(messages, seen)
    out.since, out.messages, out.first_message = before, messages[start:], start
    if start < len(seen):
        out.note = (f"the conversation differs from what request {before} showed from its "
                    f"message {start + 1} on: shown from there")
    if out.system == _system(old):
        out.system = None
    if out.tools == _tools(old):
        out.tools = None
    return out


def _schema_lines(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required") or [])
    lines = []
    for name, prop in (schema.get("properties") or {}).items():
        prop = prop if isinstance(prop, dict) else {}
        kind = prop.get("type", "any")
        if "enum" in prop:
            kind = " | ".join(json.dumps(v) for v in prop["enum"])
        said = f"      {name} ({kind}{', required' if name in required else ''})"
        described = prop.get("description")
        lines.append(f"{said}: {described}" if described else said)
    return lines


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content", "")
    if isinstance(content, list):
        return "\n".join(str(b.get("text", f"[{b.get('type')} block]")) for b in content
                         if isinstance(b, dict))
    return str(content)


def _message_lines(message: dict[str, Any], calls: dict[str, str]) -> list[str]:
    lines = [f"── {message['role']} ──"]
    for block in message["content"]:
        kind = block.get("type")
        if kind == "text":
            lines.append(str(block.get("text", "")))
        elif kind == "tool_result":
            what = calls.get(str(block.get("tool_use_id")), "a call not shown")
            mark = " (error)" if block.get("is_error") else ""
            lines += [f"[result of {what}{mark}]", _result_text(block)]
        elif kind == "tool_use":
            lines.append(f"[called {block.get('name')} "
                         f"{json.dumps(block.get('input'), ensure_ascii=False)}]")
        else:
            lines.append(f"[{kind} block]")
    return lines


def render(shown: RequestView, relay: RelayDir) -> str:
    """The view as text for a person, ending with the command that answers it."""
    since = "first request of this session" if shown.since is None else (
        f"new since request {shown.since}")
    lines = [f"request {shown.seq} · {shown.session_key} · turn {shown.turn} · "
             f"{shown.tokens:,} input tokens · {since}"]
    if shown.note:
        lines.append(f"({shown.note})")
    if shown.system is not None:
        lines += ["── system ──", shown.system]
    if shown.tools is not None:
        lines.append(f"── tools ({len(shown.tools)}) ──")
        for tool in shown.tools:
            lines.append(f"  {tool.get('name')}: {tool.get('description', '')}")
            lines += _schema_lines(tool.get("input_schema") or {})
    for message in shown.messages:
        lines += _message_lines(message, shown.calls)
    lines.append("──")
    root = shlex.quote(str(relay.root))
    if shown.answered:
        lines.append(f"answered: {relay.answer_path(shown.seq)}")
    else:
        lines.append(f"answer it: `devloop relay answer {root} {shown.seq} --file turn.yaml`, "
                     f"turn.yaml holding the turn's blocks as a stub script writes them ({GUIDE})")
    return "\n".join(lines)
