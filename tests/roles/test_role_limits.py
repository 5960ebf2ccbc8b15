"""The tester's Bash has the specification's limit of one test run (60 s); the coder's is the
configured command limit."""

from __future__ import annotations

from pathlib import Path

from devloop.core.config import Settings
from devloop.project.load import load_project
from devloop.roles.runtime import RoleRequest, prepare
from devloop.store import RedisStore


def test_the_tester_s_bash_is_limited_to_60_s_and_the_coder_s_to_the_setting(
    redis_store: RedisStore, settings: Settings, inventory_project: Path, python_toolchain_dir: Path
) -> None:
    redis_store.import_project(load_project(inventory_project))
    long = settings.model_copy(update={"command_timeout_s": 600.0})
    tester = prepare(
        redis_store, long, RoleRequest("p-inventory", "pricing", "tester", "test", 1, "run-1-1"),
        lambda e: None,
    )
    coder = prepare(
        redis_store, long, RoleRequest("p-inventory", "pricing", "coder", "implement", 1),
        lambda e: None,
    )
    try:
        assert tester.ctx.command_timeout_s == 60.0
        assert coder.ctx.command_timeout_s == 600.0
    finally:
        tester.ws.cleanup()
        coder.ws.cleanup()
