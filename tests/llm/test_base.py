"""The provider types: usage arithmetic, prices and cost, the error hierarchy."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from devloop.core.errors import DevLoopError
from devloop.llm.base import (
    DEFAULT_PRICES,
    LLMBadRequest,
    LLMConnectionError,
    LLMError,
    LLMOverloaded,
    LLMRateLimited,
    LLMServerError,
    LLMTransient,
    Price,
    Usage,
    estimate_cost,
    load_prices,
    price_of,
)

from .conftest import make_request


def test_usage_adds_field_by_field() -> None:
    a = Usage(
        input_tokens=1, output_tokens=2, cache_creation_input_tokens=3, cache_read_input_tokens=4
    )
    b = Usage(
        input_tokens=10,
        output_tokens=20,
        cache_creation_input_tokens=30,
        cache_read_input_tokens=40,
    )
    total = a + b
    assert total == Usage(
        input_tokens=11,
        output_tokens=22,
        cache_creation_input_tokens=33,
        cache_read_input_tokens=44,
    )
    assert total.prompt_tokens == 11 + 33 + 44
    assert sum([a, b], Usage()) == total


def test_default_prices_cover_the_models_we_run() -> None:
    assert DEFAULT_PRICES["claude-sonnet-4-6"] == Price(
        input=3, output=15, cache_write=3.75, cache_read=0.3
    )
    assert DEFAULT_PRICES["claude-haiku-4-5"] == Price(
        input=1, output=5, cache_write=1.25, cache_read=0.1
    )
    assert DEFAULT_PRICES["claude-opus-4-6"].input == 5
    assert DEFAULT_PRICES["claude-opus-4-1"].input == 15


def test_cost_of_a_million_tokens_of_each_kind() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_creation_input_tokens=1_000_000,
        cache_read_input_tokens=1_000_000,
    )
    assert estimate_cost("claude-sonnet-4-6", usage, DEFAULT_PRICES) == pytest.approx(22.05)


def test_a_dated_model_id_uses_its_base_price() -> None:
    usage = Usage(input_tokens=1_000_000)
    assert estimate_cost("claude-haiku-4-5-20251001", usage, DEFAULT_PRICES) == pytest.approx(1)
    assert estimate_cost("claude-opus-4-1-20250805", usage, DEFAULT_PRICES) == pytest.approx(15)


def test_an_unknown_model_has_no_price_and_is_never_costed_as_free() -> None:
    usage = Usage(input_tokens=1_000)
    assert price_of("claude-unheard-of-9", DEFAULT_PRICES) is None
    with pytest.raises(KeyError, match="DEVLOOP_PRICES_JSON"):
        estimate_cost("claude-unheard-of-9", usage, DEFAULT_PRICES)


def test_prices_json_env_overrides_and_extends_the_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "DEVLOOP_PRICES_JSON",
        '{"claude-sonnet-4-6": {"input": 1, "output": 2, "cache_write": 3, "cache_read": 4},'
        ' "my-model": {"input": 9, "output": 9, "cache_write": 9, "cache_read": 9}}',
    )
    prices = load_prices()
    assert prices["claude-sonnet-4-6"].output == 2
    assert prices["my-model"].input == 9
    assert prices["claude-haiku-4-5"] == DEFAULT_PRICES["claude-haiku-4-5"]


def test_bad_prices_json_says_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEVLOOP_PRICES_JSON", "{not json")
    with pytest.raises(DevLoopError, match="DEVLOOP_PRICES_JSON: .*fix: set it to a JSON object"):
        load_prices()


def test_transient_errors_share_a_base_and_carry_their_context() -> None:
    for cls in (LLMRateLimited, LLMOverloaded, LLMServerError, LLMConnectionError):
        assert issubclass(cls, LLMTransient) and issubclass(cls, LLMError)
    assert not issubclass(LLMBadRequest, LLMTransient)
    assert issubclass(LLMError, DevLoopError)
    error = LLMRateLimited(
        "slow down", session_key="coder.p.u", status=429, request_id="req_1", attempts=5
    )
    assert (error.session_key, error.status, error.request_id, error.attempts) == (
        "coder.p.u",
        429,
        "req_1",
        5,
    )
    assert str(error) == "session 'coder.p.u', HTTP 429: slow down"


def test_request_needs_positive_max_tokens_and_known_fields() -> None:
    with pytest.raises(ValidationError):
        make_request(max_tokens=0)
    with pytest.raises(ValidationError):
        make_request(top_k=5)
