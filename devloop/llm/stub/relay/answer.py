"""The relay's writer: content blocks (a stub-script turn) wrapped into a Messages-API
response with ids, stop_reason and usage, checked against the request it answers."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from devloop.core.errors import DevLoopError, Problem
from devloop.llm.base import STOP_REASONS
from devloop.llm.stub.cache import CacheUsage
from devloop.llm.stub.relay.files import RelayDir, write_atomically
from devloop.llm.stub.respond import build_message, session_key_of, turn_number_of, with_usage
from devloop.llm.stub.tokens import total_tokens
from devloop.llm.stub.turn import Turn
from devloop.llm.stub.yamlmarks import ScriptInvalid, problems_from_validation, read_yaml

GUIDE = "docs/playing-the-model.md"


class RelayAnswerInvalid(DevLoopError):
    """An answer that cannot be served; `problems` names each with its fix."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def read_turn(text: str, source: str) -> Turn:
    """A turn written as in a stub script: a list of blocks, or a mapping with `content:`
    (and `stop_reason:`). Errors name the line, the field and the fix."""
    try:
        data, lines = read_yaml(text, source)
    except ScriptInvalid as exc:
        raise RelayAnswerInvalid(exc.problems) from None
    if isinstance(data, list):
        data, place = {"content": data}, (lambda loc: loc[1:] if loc[:1] == ("content",) else loc)
    else:
        place = lambda loc: loc  # noqa: E731
    if not isinstance(data, dict):
        raise RelayAnswerInvalid([Problem(source, "(top level)", "an answer is a list of blocks",
                                          f"write `- text: ...` and `- tool_use: {{name: ..., "
                                          f"input: {{...}}}}` items ({GUIDE})")])
    try:
        return Turn.model_validate(data)
    except ValidationError as exc:
        problems = problems_from_validation(exc, source, lines, Turn, place)
        raise RelayAnswerInvalid(problems) from None


def wrap(turn: Turn, body: dict[str, Any]) -> dict[str, Any]:
    """The response to `body`: the turn's blocks with tool_use ids, its stop_reason and a
    usage that counts the whole prompt as input (the server splits off what it cached)."""
    message = build_message(turn, body, session_key_of(body), turn_number_of(body), None)
    return with_usage(message, CacheUsage(total_tokens(body), 0, 0))


def _block_problems(i: int, block: Any, offered: list[str], seen: set[str]) -> list[str]:
    where = f"content[{i}]"
    if not isinstance(block, dict):
        return [f"{where}: a block is a mapping"]
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        ok = isinstance(text, str) and text.strip()
        # The API refuses an empty text block when the runtime sends the turn back.
        return [] if ok else [f"{where}.text: a text block needs some text"]
    if kind != "tool_use":
        return [f"{where}.type: {kind!r}; a model answers with `text` and `tool_use` blocks"]
    out = []
    ident, name = block.get("id"), block.get("name")
    if not isinstance(ident, str) or not ident.startswith("toolu_") or ident in seen:
        out.append(f"{where}.id: {ident!r} is not a fresh `toolu_...` id")
    else:
        seen.add(ident)
    if name not in offered:
        out.append(f"{where}.name: {name!r} is not a tool this request offers; "
                   f"offered: {', '.join(offered) or '(none)'}")
    if not isinstance(block.get("input"), dict):
        out.append(f"{where}.input: a tool's input is a mapping")
    return out


def answer_problems(message: Any, body: dict[str, Any]) -> list[str]:
    """What makes `message` an answer the API would never send to `body` ([]: none)."""
    if not isinstance(message, dict):
        return ["the answer is not a JSON object"]
    out = [f"{key}: should be {want!r}" for key, want in
           (("type", "message"), ("role", "assistant")) if message.get(key) != want]
    content = message.get("content")
    if not isinstance(content, list):
        return [*out, "content: should be a list of blocks"]
    offered = [str(t.get("name")) for t in body.get("tools") or [] if isinstance(t, dict)]
    seen: set[str] = set()
    for i, block in enumerate(content):
        out += _block_problems(i, block, offered, seen)
    stop = message.get("stop_reason")
    if stop not in STOP_REASONS:
        out.append(f"stop_reason: {stop!r}; use one of {', '.join(sorted(STOP_REASONS))}")
    elif seen and stop == "end_turn":
        out.append("stop_reason: end_turn with tool calls; a turn that calls tools stops "
                   "with tool_use (leave stop_reason out and it is chosen for you)")
    elif not content and stop in ("end_turn", "tool_use"):
        out.append("content: empty; end a session with a text block that sums it up")
    usage = message.get("usage")
    if not isinstance(usage, dict) or not all(
            isinstance(usage.get(k), int) for k in ("input_tokens", "output_tokens")):
        out.append("usage: needs input_tokens and output_tokens (integers)")
    return out


def _problem(where: str, said: str) -> Problem:
    field, _, message = said.partition(": ")
    return Problem(where, field, message)


def write_answer(relay: RelayDir, seq: int, turn: Turn) -> dict[str, Any]:
    """Wrap `turn` as the answer to request `seq`, check it, and write it for the server."""
    where = str(relay.answer_path(seq))
    if relay.entry(seq) is None:
        raise RelayAnswerInvalid([Problem(str(relay.root), "seq", f"no request {seq}",
                                          "answer a request `devloop relay show` lists")])
    if relay.answer_path(seq).exists():
        raise RelayAnswerInvalid([Problem(where, "(file)", f"request {seq} is answered already",
                                          "answer the next request (`devloop relay show`)")])
    body = relay.request(seq)
    message = wrap(turn, body)
    problems = answer_problems(message, body)
    if problems:
        raise RelayAnswerInvalid([_problem(where, p) for p in problems])
    write_atomically(relay.answer_path(seq), json.dumps(message, indent=1))
    return message
