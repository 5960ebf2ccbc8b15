"""AnthropicProvider: the Messages API through the official SDK, with our own retry policy.

The SDK's retries are off (`max_retries=0`) so that one place decides: bounded
attempts, exponential backoff with jitter, `retry-after-ms`/`retry-after` honoured,
and a typed error once the attempts run out.
"""

from __future__ import annotations

import copy
import email.utils
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import anthropic
import httpx2

from devloop.llm.base import (
    STOP_REASONS,
    LLMAuthError,
    LLMBadRequest,
    LLMConnectionError,
    LLMError,
    LLMOverloaded,
    LLMRateLimited,
    LLMRequest,
    LLMResponse,
    LLMServerError,
    LLMTransient,
    LLMUnpriced,
    Price,
    Usage,
    estimate_cost,
    load_prices,
    price_of,
    unpriced,
)

log = logging.getLogger(__name__)

EPHEMERAL = {"type": "ephemeral"}
# The SDK refuses a non-streaming call whose expected duration passes 10 minutes:
# 3600 s * max_tokens / 128_000 > 600 s, i.e. max_tokens above 21_333.
NON_STREAMING_MAX_TOKENS = 21_333

_BY_ERROR_TYPE: dict[str, type[LLMError]] = {
    "rate_limit_error": LLMRateLimited,
    "overloaded_error": LLMOverloaded,
    "api_error": LLMServerError,
    "timeout_error": LLMServerError,
    "authentication_error": LLMAuthError,
    "permission_error": LLMAuthError,
    "billing_error": LLMAuthError,
    "invalid_request_error": LLMBadRequest,
    "not_found_error": LLMBadRequest,
    "request_too_large": LLMBadRequest,
}


def error_class(status: int | None, error_type: str | None) -> type[LLMError]:
    """Our exception class for an HTTP status and the body's `error.type`."""
    if status == 429:
        return LLMRateLimited
    if status == 529:
        return LLMOverloaded
    if status is not None and (status >= 500 or status in (408, 409)):
        return LLMServerError
    if status in (401, 402, 403):
        return LLMAuthError
    if status in (400, 404, 413, 422):
        return LLMBadRequest
    # An error event inside a 200 event stream carries only its type.
    return _BY_ERROR_TYPE.get(error_type or "", LLMError)


def to_llm_error(exc: Exception, session_key: str, attempts: int) -> LLMError:
    """Map an SDK (or transport) exception to our typed error."""
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code if exc.status_code != 200 else None
        error_type = getattr(exc, "type", None)
        message = getattr(exc, "api_message", None) or exc.message
        cls = error_class(status, error_type)
        return cls(
            message,
            session_key=session_key,
            status=status,
            request_id=exc.request_id,
            attempts=attempts,
        )
    if isinstance(exc, (anthropic.APIConnectionError, httpx2.TransportError)):
        return LLMConnectionError(f"no response: {exc}", session_key=session_key, attempts=attempts)
    return LLMError(str(exc), session_key=session_key, attempts=attempts)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds the server asked us to wait (`retry-after-ms`, then `retry-after`), or None."""
    if not headers:
        return None
    try:
        return float(headers["retry-after-ms"]) / 1000
    except (KeyError, TypeError, ValueError):
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        when = email.utils.parsedate_tz(value)  # the HTTP-date form
        return None if when is None else email.utils.mktime_tz(when) - time.time()


def with_breakpoints(request: LLMRequest) -> dict[str, Any]:
    """The SDK call's keyword arguments, with the two prompt-cache breakpoints.

    One breakpoint ends the system prompt (caching tools + system); the other moves to
    the last block of the last message, so each turn reads what the previous one wrote.
    """
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": _mark_last_block(request.messages),
        "metadata": {"user_id": request.session_key},
    }
    if request.system:
        params["system"] = [{"type": "text", "text": request.system, "cache_control": EPHEMERAL}]
    if request.tools:
        params["tools"] = [tool.model_dump() for tool in request.tools]
    return params


def _mark_last_block(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = copy.deepcopy(messages)  # never mutate the caller's transcript
    if not out:
        return out
    last = out[-1]
    content = last.get("content")
    if isinstance(content, str):
        last["content"] = [{"type": "text", "text": content, "cache_control": EPHEMERAL}]
    elif isinstance(content, list) and content and isinstance(content[-1], dict):
        content[-1]["cache_control"] = EPHEMERAL
    return out


def _block_dict(block: Any) -> dict[str, Any]:
    # Plain, minimal dicts: they are sent back as the assistant's turn, and SDK-only
    # fields (parsed_output, caller=None, ...) would be rejected by the API.
    if block.type == "text":
        return {"type": "text", "text": block.text}
    if block.type == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input)}
    dumped: dict[str, Any] = block.model_dump(mode="json", exclude_none=True)
    return dumped


class AnthropicProvider:
    """LLMProvider over `anthropic.Anthropic`; reads ANTHROPIC_API_KEY/BASE_URL when not given."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_retries: int = 4,
        base_delay_s: float = 1.0,
        max_delay_s: float = 30.0,
        max_retry_after_s: float = 120.0,
        timeout_s: float | None = None,
        prices: dict[str, Price] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        client: anthropic.Anthropic | None = None,
    ) -> None:
        extra: dict[str, Any] = {} if timeout_s is None else {"timeout": timeout_s}
        # Missing credentials surface as LLMAuthError on the first call (which knows its
        # session), not here: the SDK raises CredentialsError now or a TypeError later.
        self._no_credentials: str | None = None
        if client is None:
            try:
                client = anthropic.Anthropic(
                    api_key=api_key, base_url=base_url, max_retries=0, **extra
                )
            except anthropic.CredentialsError as exc:
                self._no_credentials = str(exc)
                # A placeholder: complete() raises before it is ever used.
                client = anthropic.Anthropic(api_key="", base_url=base_url, max_retries=0)
            else:
                if not (client.api_key or client.auth_token or client.credentials):
                    self._no_credentials = "no API key found"
        self.client = client
        self.max_retries = max_retries
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.max_retry_after_s = max_retry_after_s
        self.prices = load_prices() if prices is None else prices
        self._sleep = sleep
        self._warned_temperature = False

    def complete(self, request: LLMRequest) -> LLMResponse:
        """One model turn; transient failures are retried, the rest raise typed errors."""
        if self._no_credentials is not None:
            raise LLMAuthError(
                f"{self._no_credentials}; fix: set ANTHROPIC_API_KEY (or pass api_key=)",
                session_key=request.session_key,
            )
        if price_of(request.model, self.prices) is None:
            # Priced at 0 it would pass every cap: refused before anything is spent.
            raise LLMUnpriced(unpriced(request.model), session_key=request.session_key)
        if request.temperature is not None and not self._warned_temperature:
            # API version 2026-10-21 (SDK 2.x) rejects every sampling parameter with a 400.
            self._warned_temperature = True
            log.warning(
                "temperature=%s ignored: the Messages API no longer accepts it", request.temperature
            )
        params = with_breakpoints(request)
        attempt = 0
        while True:
            attempt += 1
            try:
                message, request_id = self._send(params, request.max_tokens)
            except (anthropic.APIError, httpx2.TransportError) as exc:
                error = to_llm_error(exc, request.session_key, attempt)
                if not isinstance(error, LLMTransient) or attempt > self.max_retries:
                    raise error from exc
                delay = self.retry_delay(exc, attempt)
                log.warning("%s; retry %d of %d in %.2fs", error, attempt, self.max_retries, delay)
                self._sleep(delay)
                continue
            return self._response(message, request, request_id, attempt)

    def retry_delay(self, exc: Exception, attempt: int) -> float:
        """What the server asked for, else capped exponential backoff with jitter."""
        response = getattr(exc, "response", None)
        asked = parse_retry_after(getattr(response, "headers", None))
        if asked is not None:
            return min(max(asked, 0.0), self.max_retry_after_s)
        backoff = min(self.base_delay_s * 2 ** (attempt - 1), self.max_delay_s)
        return backoff * (0.5 + random.random() / 2)  # jitter spreads a fleet's retries apart

    def _send(self, params: dict[str, Any], max_tokens: int) -> tuple[Any, str | None]:
        if max_tokens > NON_STREAMING_MAX_TOKENS:
            with self.client.messages.stream(**params) as stream:
                return stream.get_final_message(), stream.request_id
        message = self.client.messages.create(**params)
        return message, message._request_id

    def _response(
        self, message: Any, request: LLMRequest, request_id: str | None, attempts: int
    ) -> LLMResponse:
        if message.stop_reason not in STOP_REASONS:
            raise LLMError(
                f"unexpected stop_reason {message.stop_reason!r}",
                session_key=request.session_key,
                request_id=request_id,
            )
        raw = message.usage
        usage = Usage(
            input_tokens=raw.input_tokens,
            output_tokens=raw.output_tokens,
            cache_creation_input_tokens=raw.cache_creation_input_tokens or 0,
            cache_read_input_tokens=raw.cache_read_input_tokens or 0,
        )
        return LLMResponse(
            content=[_block_dict(b) for b in message.content],
            stop_reason=message.stop_reason,
            usage=usage,
            # Priced as asked: a proxy that answers with another id does not set the price.
            cost_usd=estimate_cost(request.model, usage, self.prices),
            model=str(message.model or request.model),
            request_id=request_id,
            attempts=attempts,
        )
