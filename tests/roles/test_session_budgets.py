"""The DEVLOOP_SESSION_MAX_* settings reach a role's session: each ends it with its reason."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles.coder import run_coder
from devloop.roles.runtime import RoleRequest
from devloop.store import RedisStore
from tests.conftest import EXAMPLES


@pytest.fixture
def stub() -> Iterator[StubServer]:
    with StubServer(EXAMPLES / "inventory" / "stub.yaml") as server:
        yield server


@pytest.mark.parametrize(
    ("setting", "value", "reason"),
    [
        ("session_max_turns", 1, "budget_turns"),
        ("session_max_tokens", 1, "budget_tokens"),
        ("session_max_usd", 0.000001, "budget_usd"),
    ],
)
def test_a_session_budget_from_the_settings_ends_the_coders_session(
    redis_store: RedisStore, settings: Settings, inventory_project: Path, stub: StubServer,
    setting: str, value: float, reason: str,
) -> None:
    redis_store.import_project(load_project(inventory_project))
    llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
    tight = settings.model_copy(update={setting: value})
    run, output = run_coder(redis_store, tight, llm,
                            RoleRequest("p-inventory", "stock-db", "coder", "implement", 1))
    assert run.session is not None
    assert (run.session.status, run.session.terminal_reason) == ("budget_exceeded", reason)
    assert run.session.turns == 1  # every budget here is spent by the first turn
    assert not output.ok
