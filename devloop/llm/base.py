"""The LLM provider protocol, its request/response types, typed errors and prices.

Exceptions, drawn once (httpx style)::

    LLMError                  base: session_key, status (None without an HTTP response), request_id
    +-- LLMTransient          worth retrying; raised only once retries are exhausted (attempts)
    |   +-- LLMRateLimited    429 rate_limit_error
    |   +-- LLMOverloaded     529 overloaded_error
    |   +-- LLMServerError    500-599 (but 529), 408, 409
    |   +-- LLMConnectionError  no response at all: refused, reset, dropped, timed out
    +-- LLMBadRequest         400/404/413/422: the request cannot succeed as sent
    |                         (invalid tool input, too many cache breakpoints, unknown model)
    +-- LLMAuthError          401/402/403: credentials, permissions or billing
"""

from __future__ import annotations

import json
import shlex
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from pydantic_settings.exceptions import SettingsError

from devloop.core.errors import DevLoopError

StopReason = Literal[
    "end_turn",
    "tool_use",
    "max_tokens",
    "stop_sequence",
    "pause_turn",
    "refusal",
    "model_context_window_exceeded",
]
STOP_REASONS: frozenset[str] = frozenset(StopReason.__args__)  # type: ignore[attr-defined]


class ToolSpec(BaseModel):
    """A tool shown to the model: name, description and JSON schema of its input."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str
    input_schema: dict[str, Any]


class LLMRequest(BaseModel):
    """One call to the model: the whole conversation so far, in Anthropic's message format."""

    model_config = ConfigDict(extra="forbid")

    session_key: str
    system: str
    tools: list[ToolSpec] = Field(default_factory=list)
    messages: list[dict[str, Any]]
    max_tokens: int = Field(gt=0)
    model: str
    temperature: float | None = None


class Usage(BaseModel):
    """Token counts of one call (or a sum of calls); input = uncached + written + read."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_creation_input_tokens=self.cache_creation_input_tokens
            + other.cache_creation_input_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
        )

    @property
    def prompt_tokens(self) -> int:
        """Every input token of the call, cached or not."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens


class LLMResponse(BaseModel):
    """The model's turn: content blocks as plain dicts, why it stopped, what it cost."""

    model_config = ConfigDict(extra="forbid")

    content: list[dict[str, Any]]
    stop_reason: StopReason
    usage: Usage
    cost_usd: float
    model: str
    request_id: str | None = None
    attempts: int = 1  # HTTP attempts this call took; > 1 means transient errors were survived


class LLMProvider(Protocol):
    """Anything that turns an LLMRequest into the model's next turn."""

    def complete(self, request: LLMRequest) -> LLMResponse: ...


# --- errors ------------------------------------------------------------------------


class LLMError(DevLoopError):
    """A call to the model failed; carries the session, HTTP status and request id."""

    def __init__(
        self,
        message: str,
        *,
        session_key: str,
        status: int | None = None,
        request_id: str | None = None,
        attempts: int = 1,
    ) -> None:
        self.session_key = session_key
        self.status = status
        self.request_id = request_id
        self.attempts = attempts
        where = f"session {session_key!r}" + (f", HTTP {status}" if status else "")
        super().__init__(f"{where}: {message}")


class LLMTransient(LLMError):
    """A failure worth retrying; raised only after the provider's retries ran out."""


class LLMRateLimited(LLMTransient):
    """429: the rate limit held for every attempt."""


class LLMOverloaded(LLMTransient):
    """529: the API stayed overloaded for every attempt."""


class LLMServerError(LLMTransient):
    """5xx (or 408/409) on every attempt."""


class LLMConnectionError(LLMTransient):
    """No HTTP response at all on every attempt: refused, reset, dropped or timed out."""


class LLMBadRequest(LLMError):
    """The request cannot succeed as sent (400 and kin); fix the request, do not retry."""


class LLMAuthError(LLMError):
    """401/402/403: the key, its permissions or the account need a human."""


class LLMUnpriced(LLMError):
    """The model has no price, so no spend cap could be kept: refused before the call."""


# --- prices ------------------------------------------------------------------------


class Price(BaseModel):
    """USD per million tokens of one model."""

    model_config = ConfigDict(extra="forbid")

    input: float
    output: float
    cache_write: float
    cache_read: float

    def cost(self, usage: Usage) -> float:
        """Dollars for usage at these rates."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_creation_input_tokens * self.cache_write
            + usage.cache_read_input_tokens * self.cache_read
        ) / 1_000_000


def _price(inp: float, out: float) -> Price:
    # Anthropic's 5-minute cache write is 1.25x input and a cache read 0.1x input.
    return Price(input=inp, output=out, cache_write=inp * 1.25, cache_read=round(inp * 0.1, 6))


DEFAULT_PRICES: dict[str, Price] = {
    "claude-sonnet-4-6": _price(3, 15),
    "claude-sonnet-4-5": _price(3, 15),
    "claude-sonnet-4-0": _price(3, 15),
    "claude-sonnet-4": _price(3, 15),
    "claude-haiku-4-5": _price(1, 5),
    "claude-opus-4-8": _price(5, 25),
    "claude-opus-4-7": _price(5, 25),
    "claude-opus-4-6": _price(5, 25),
    "claude-opus-4-5": _price(5, 25),
    "claude-opus-4-1": _price(15, 75),
    "claude-opus-4-0": _price(15, 75),
    "claude-opus-4": _price(15, 75),
    "claude-opus-5": _price(5, 25),
}

def price_of(model: str, prices: dict[str, Price]) -> Price | None:
    """model's price; a dated id (`...-20251001`) has its base id's. None: unpriced."""
    price = prices.get(model)
    if price is None:
        # Longest key that the id starts with: claude-opus-4-1-2025... -> claude-opus-4-1.
        keys = [k for k in prices if model.startswith(k + "-")]
        price = prices[max(keys, key=len)] if keys else None
    return price


def unpriced_fault(model: str) -> tuple[str, str]:
    """Why a model without a price is refused, and the fix (a shell line that works)."""
    example = json.dumps({model: {"input": 3, "output": 15, "cache_write": 3.75,
                                  "cache_read": 0.3}})
    return (f"no price for model {model!r}, so the spend caps (DEVLOOP_SESSION_MAX_USD, "
            "--max-usd) could not be kept",
            "price it in dollars per million tokens (or use a model DevLoop prices): "
            f"export DEVLOOP_PRICES_JSON={shlex.quote(example)}")


def unpriced(model: str) -> str:
    """unpriced_fault as one message."""
    why, fix = unpriced_fault(model)
    return f"{why}; fix: {fix}"


def estimate_cost(model: str, usage: Usage, prices: dict[str, Price]) -> float:
    """Cost of usage for model (the id DevLoop asked for: a proxy may answer with another).

    An unpriced model raises KeyError: a cost of 0 would let every cap fail open, so the
    provider refuses such a model before calling it.
    """
    price = price_of(model, prices)
    if price is None:
        raise KeyError(unpriced(model))
    return price.cost(usage)


class PriceSettings(BaseSettings):
    """`DEVLOOP_PRICES_JSON`: a JSON object of model id -> Price, merged over the defaults."""

    model_config = SettingsConfigDict(env_prefix="DEVLOOP_", extra="ignore")

    prices_json: dict[str, Price] = Field(default_factory=dict)


def load_prices() -> dict[str, Price]:
    """The default price table with `DEVLOOP_PRICES_JSON` laid over it, read now."""
    try:
        overrides = PriceSettings().prices_json
    except (SettingsError, ValueError) as exc:
        raise DevLoopError(
            f"DEVLOOP_PRICES_JSON: {exc}; fix: set it to a JSON object like "
            '{"my-model": {"input": 3, "output": 15, "cache_write": 3.75, "cache_read": 0.3}}'
        ) from exc
    return {**DEFAULT_PRICES, **overrides}
