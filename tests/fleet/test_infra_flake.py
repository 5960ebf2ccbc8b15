"""A package install that times out in a session is infra_flake: the step runs again (its
session resumes and runs the install again), the attempt is not counted, and no model
turn is asked twice. Carried by the library's own steps (no Celery)."""

from __future__ import annotations

from pathlib import Path

from devloop.core.config import Settings
from devloop.ledgers import Timeline
from devloop.store import RedisStore
from tests.agent.test_infra_flake import FLAKY
from tests.fleet.builder import UnitPlan, build, script
from tests.fleet.chain import chains


def test_an_install_timeout_is_retried_as_infrastructure_not_counted_as_the_model_s(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, tmp_path: Path
) -> None:
    plans = [UnitPlan("u")]
    turns = script(plans)
    first = turns["sessions"]["coder.*.u"]["turns"][1]
    first["content"].insert(0, {"tool_use": {"name": "Bash", "input": {"command": FLAKY}}})
    with chains(redis_store, settings, build(tmp_path / "p", plans), turns,
                command_timeout_s=2, step_retry_base_s=0.1) as c:
        c.run()
    [(why, waiting)] = c.waits
    assert "infra_flake: a package install timed out after 2 s" in why
    assert waiting.attempt == 1 and waiting.extra["step_failures"] == 1
    assert (waiting.last_error or "").startswith("infra_flake: ")
    state = redis_store.get_state(c.pid, "u")
    assert (state.status, state.attempt, state.failure_signature) == ("passed", 1, None)
    # Turn 1 was answered once: the resumed session ran its calls again, it did not ask.
    assert [t for t, _ in c.requests("coder.")] == [1, 2, 3]
    kinds = [e.kind for e in Timeline(redis_store.sink(c.pid, "timeline")).events(unit_id="u")]
    assert kinds.count("loop_retry_step") == 1 and "loop_pass" in kinds
    assert ".warm" not in str(redis_store.unit_files(c.pid, "u").files)
