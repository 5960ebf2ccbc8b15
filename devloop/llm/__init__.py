"""LLM providers: the protocol and its types, the Anthropic provider, and the stub server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from devloop.llm.base import (
    DEFAULT_PRICES,
    LLMAuthError,
    LLMBadRequest,
    LLMConnectionError,
    LLMError,
    LLMOverloaded,
    LLMProvider,
    LLMRateLimited,
    LLMRequest,
    LLMResponse,
    LLMServerError,
    LLMTransient,
    LLMUnpriced,
    Price,
    StopReason,
    ToolSpec,
    Usage,
    estimate_cost,
    load_prices,
    price_of,
)

if TYPE_CHECKING:
    from devloop.llm.anthropic import AnthropicProvider


def __getattr__(name: str) -> Any:
    # Importing the SDK takes about a second; the stub server and code that only needs
    # the types should not pay for it, so AnthropicProvider loads on first use.
    if name == "AnthropicProvider":
        from devloop.llm.anthropic import AnthropicProvider

        return AnthropicProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_PRICES",
    "AnthropicProvider",
    "LLMAuthError",
    "LLMUnpriced",
    "LLMBadRequest",
    "LLMConnectionError",
    "LLMError",
    "LLMOverloaded",
    "LLMProvider",
    "LLMRateLimited",
    "LLMRequest",
    "LLMResponse",
    "LLMServerError",
    "LLMTransient",
    "Price",
    "StopReason",
    "ToolSpec",
    "Usage",
    "estimate_cost",
    "load_prices",
    "price_of",
]
