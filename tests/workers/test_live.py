"""The live table and `devloop status` say why a unit waits or stopped."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.records import environment_key
from devloop.fleet.status import project_status
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build
from workers.live import print_status


def test_a_waiting_unit_shows_the_providers_error_and_a_blocked_one_its_reason(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    report, _ = enqueue_project(redis_store, build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b")]))
    redis_store.put_state(report.pid, "a", UnitState(
        status="waiting_model", attempt=1, last_error="HTTP 529: Overloaded"))
    redis_store.put_state(report.pid, "b", UnitState(
        status="blocked", attempt=1, last_error="OSError: [Errno 28] No space left on device",
        blocked_reason="infrastructure: OSError: [Errno 28] No space left on device"))
    redis_store.client.set(environment_key(redis_store, report.pid), "bubblewrap cannot start")
    state = project_status(redis_store, report.pid)
    rows = {r.unit_id: r for r in state.units}
    assert rows["a"].last_error == "HTTP 529: Overloaded" and rows["a"].blocked_reason is None
    assert (rows["b"].blocked_reason or "").startswith("infrastructure: OSError")
    assert state.environment_error == "bubblewrap cannot start"
    console = Console(record=True, width=200)
    print_status(console, state)
    shown = console.export_text()
    assert "waiting_model" in shown and "HTTP 529: Overloaded" in shown
    assert "infrastructure: OSError: [Errno 28] No space left on device" in shown
    assert "1 waiting for the model" in shown
    assert "environment: bubblewrap cannot start" in shown
