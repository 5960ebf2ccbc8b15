"""What the stub answers: routing, auth, validation, scripted turns, faults, cache usage.

No sockets here: `StubApp.handle` maps (path, headers, body bytes) to a Reply, and
server.py carries it over HTTP.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from devloop.llm.stub.cache import MAX_BREAKPOINTS, PromptCache, TooManyBreakpoints
from devloop.llm.stub.imperfect import answer_turn
from devloop.llm.stub.relay.desk import RelayDesk, Unanswered
from devloop.llm.stub.respond import (
    build_message,
    session_key_of,
    sse_events,
    turn_number_of,
    with_usage,
)
from devloop.llm.stub.script import Script
from devloop.llm.stub.tokens import PrefixBlock, prefix_blocks, total_tokens
from devloop.llm.stub.turn import HTTP_FAULTS, Turn
from devloop.llm.stub.validate import request_problem
from devloop.llm.stub.yamlmarks import ScriptInvalid

_FAULT_REPLIES = {  # kind -> (status, error type, message)
    "rate_limit": (
        429,
        "rate_limit_error",
        "Number of request tokens has exceeded your rate limit.",
    ),
    "overloaded": (529, "overloaded_error", "Overloaded"),
    "server_error": (500, "api_error", "Internal server error"),
    "authentication": (401, "authentication_error", "invalid x-api-key"),
    "unknown_model": (404, "not_found_error", "model: {model}"),
    "invalid_request": (400, "invalid_request_error",
                        "messages.1.content.0.tool_use.input: Input should be a valid dictionary"),
}


@dataclass(slots=True)
class RecordedRequest:
    """One request the stub received, and how it answered. `headers` and `body` are kept
    only by a stub asked to record them (`record_bodies`): a long run sends gigabytes."""

    path: str
    headers: dict[str, str]  # names lower-cased ({} unless recorded)
    body: Any  # None unless recorded
    session_key: str = ""
    turn: int = 0
    status: int = 0  # 0 when the connection was dropped
    fault: str | None = None
    usage: dict[str, int] | None = None  # the usage it answered with (a scripted turn)


@dataclass
class Reply:
    """What the handler sends: a JSON body, an SSE event stream, or nothing (drop)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: Iterator[bytes] | None = None
    drop: bool = False
    delay_s: float = 0.0


def _error(status: int, kind: str, message: str, request_id: str, **headers: str) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": request_id}
    return Reply(
        status,
        {"content-type": "application/json", "request-id": request_id, **headers},
        json.dumps(body).encode(),
    )


def _json(data: Any, request_id: str) -> Reply:
    return Reply(
        200,
        {"content-type": "application/json", "request-id": request_id},
        json.dumps(data).encode(),
    )


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class StubApp:
    """The stub's state: its script, the prompt cache, fault counters, every request seen
    (what it asked and how it was answered; its headers and body only with record_bodies)."""

    def __init__(
        self, script: Script, api_key: str | None = None, record_bodies: bool = False,
        desk: RelayDesk | None = None,
    ) -> None:
        self.script = script
        self.desk = desk  # relay mode: answers come from files, not from the script
        self.api_key = api_key  # None: any non-empty key is accepted
        self.record_bodies = record_bodies
        self.requests: list[RecordedRequest] = []
        self.cache = PromptCache(script.cache.min_tokens)
        self._faults_served: dict[tuple[str, int], int] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def handle(self, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        """Answer one POST: record it, check auth, route it."""
        request_id = f"req_stub_{next(self._ids):06d}"
        lower = {k.lower(): v for k, v in headers.items()}
        try:
            body: Any = json.loads(raw or b"null")
        except ValueError:
            body = raw.decode("utf-8", "replace")
        record = RecordedRequest(path.split("?")[0], lower, body)
        with self._lock:
            self.requests.append(record)
        reply = self._route(record, lower, request_id)
        record.status = 0 if reply.drop else reply.status
        if not self.record_bodies:
            record.headers, record.body = {}, None
        return reply

    def _authorized(self, headers: dict[str, str]) -> bool:
        # The SDK 2.x sends `Authorization: Bearer`; older clients send `x-api-key`.
        bearer = headers.get("authorization", "")
        key = headers.get("x-api-key") or (
            bearer[7:] if bearer.lower().startswith("bearer ") else ""
        )
        return bool(key) and (self.api_key is None or key == self.api_key)

    def _route(self, record: RecordedRequest, headers: dict[str, str], request_id: str) -> Reply:
        if not self._authorized(headers):
            return _error(401, "authentication_error", "invalid x-api-key", request_id)
        if not isinstance(record.body, dict):
            return _error(
                400, "invalid_request_error", "the body must be a JSON object", request_id
            )
        version = headers.get("anthropic-version", "")
        if record.path == "/v1/messages/count_tokens":
            problem = request_problem(record.body, api_version=version, needs_max_tokens=False)
            if problem:
                return _error(400, "invalid_request_error", problem, request_id)
            return _json({"input_tokens": total_tokens(record.body)}, request_id)
        if record.path == "/v1/messages":
            return self._messages(record, request_id, version)
        return _error(404, "not_found_error", f"no route {record.path}", request_id)

    def _take_fault(self, session_key: str, turn: int, spec: Turn) -> str | None:
        """The fault to serve now, counting it against `times` for (session, turn)."""
        if spec.fault is None:
            return None
        with self._lock:
            served = self._faults_served.get((session_key, turn), 0)
            if served >= spec.fault.times:
                return None
            self._faults_served[(session_key, turn)] = served + 1
        return spec.fault.kind

    def _messages(self, record: RecordedRequest, request_id: str, version: str) -> Reply:
        body: dict[str, Any] = record.body
        problem = request_problem(body, api_version=version)
        if problem:
            return _error(400, "invalid_request_error", problem, request_id)
        blocks = prefix_blocks(body)
        marked = sum(1 for b in blocks if b.breakpoint)
        if marked > MAX_BREAKPOINTS:
            return _error(400, "invalid_request_error", str(TooManyBreakpoints(marked)), request_id)
        key, turn = session_key_of(body), turn_number_of(body)
        record.session_key, record.turn = key, turn
        if self.desk is not None:
            try:
                relayed = self.desk.answer(key, turn, body)
            except Unanswered as exc:  # a 5xx: the client retries, and waits again
                return _error(504, "timeout_error", str(exc), request_id)
            return self._answer(record, relayed, blocks, request_id, 0.0)
        try:
            spec = answer_turn(self.script, key, turn, body)
        except ScriptInvalid as exc:  # a template whose values do not make a turn
            return _error(400, "invalid_request_error", str(exc), request_id)
        if spec is None:
            return _error(
                400,
                "invalid_request_error",
                f"stub script has no turn {turn} for session {key!r} and no default; "
                f"add it under sessions.<pattern>.turns.{turn}, or a `default:` turn",
                request_id,
            )
        fault = record.fault = self._take_fault(key, turn, spec)
        delay = spec.latency_ms / 1000
        if fault == "drop":
            return Reply(drop=True, delay_s=delay)
        if fault in HTTP_FAULTS:
            status, kind, message = _FAULT_REPLIES[fault]
            message = message.format(model=body.get("model", "?"))
            extra = {}
            if fault in ("rate_limit", "overloaded") and spec.fault is not None:
                extra["retry-after"] = _seconds(spec.fault.retry_after)
            reply = _error(status, kind, message, request_id, **extra)
            reply.delay_s = delay
            return reply
        answer = build_message(spec, body, key, turn, fault)
        if self.script.answer_model:
            answer["model"] = self.script.answer_model
        return self._answer(record, answer, blocks, request_id, delay)

    def _answer(self, record: RecordedRequest, answer: dict[str, Any], blocks: list[PrefixBlock],
                request_id: str, delay: float) -> Reply:
        """The message as JSON or an event stream, its usage split by the prompt cache."""
        body: dict[str, Any] = record.body
        record.usage = with_usage(answer, self.cache.account(blocks))["usage"]
        if body.get("stream"):
            headers = {
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
                "request-id": request_id,
            }
            return Reply(200, headers, events=sse_events(answer), delay_s=delay)
        reply = _json(answer, request_id)
        reply.delay_s = delay
        return reply
