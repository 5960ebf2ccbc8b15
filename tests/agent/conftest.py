"""Fixtures for agent tests: a factory of real session rigs, torn down after each test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.store import RedisStore
from tests.agent.harness import Harness, MakeHarness, build


@pytest.fixture
def make_harness(
    redis_store: RedisStore, settings: Settings, todo_project: Path
) -> Iterator[MakeHarness]:
    built: list[Harness] = []

    def make(script: dict) -> Harness:  # type: ignore[type-arg]
        harness = build(redis_store, settings, todo_project, script)
        built.append(harness)
        return harness

    yield make
    for harness in built:
        if harness.stub is not None:
            harness.stub.stop()
        harness.workspace.cleanup()
