"""What the console's pages read: a unit's page reads that unit's keys (and the project's
few), never every unit's, so it costs the same at 400 units as at 10."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from devloop.console.pages import unit_view
from devloop.console.shape import Shapes
from devloop.core import dag
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, save_step
from devloop.ledgers import BugLedger, Timeline
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from tests.console.served import layered

PID = "p-views"
DONE = "monitor-done"


@contextmanager
def monitored(server: RedisServer) -> Iterator[list[str]]:
    """Every command Redis runs while the block runs (MONITOR), as text."""
    seen: list[str] = []
    started = threading.Event()

    def watch() -> None:
        with server.client().monitor() as monitor:
            started.set()
            for command in monitor.listen():
                if DONE in command["command"]:
                    return
                seen.append(command["command"])

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    started.wait(10)
    client = server.client()
    client.ping()
    try:
        yield seen
    finally:
        client.echo(DONE)
        thread.join(10)


def _record(unit: str, role: str) -> StepRecord:
    return StepRecord(role=role, attempt=1, msg=StepMsg(pid=PID, unit_id=unit, attempt=1),
                      worker="w", started_at=1.0, ended_at=2.0, tokens=100,
                      output={"failures": [{"test": "t", "expected": 42, "got": 41}]}
                      if role == "tester" else {})


@pytest.mark.timeout(120)
def test_a_units_page_reads_that_units_keys_and_no_other_units(
    tmp_path: Path, redis_server: RedisServer, redis_store: RedisStore
) -> None:
    units = layered(tmp_path / "p", redis_store, 400, PID)
    timeline, bugs = (Timeline(redis_store.sink(PID, "timeline")),
                      BugLedger(redis_store.sink(PID, "bugs")))
    for unit in units:
        timeline.append("unit_coded", unit_id=unit, agent="coder", summary="coded")
        timeline.append("loop_fail", unit_id=unit, agent="loop", summary="red")
        save_step(redis_store, PID, unit, _record(unit, "coder"))
        save_step(redis_store, PID, unit, _record(unit, "tester"))
    for unit in units[100:130]:
        bug, _ = bugs.open(unit, "run-1-1", "t")
        bugs.transition(bug.id, "fixing", by="loop")
    unit = units[123]
    redis_store.put_state(PID, unit, UnitState(status="blocked", attempt=3,
                                               blocked_reason="the same failure 3 times"))
    shapes = Shapes(redis_store)
    shapes.get(PID)  # the console keeps the project's shape while units.json stays the same

    with monitored(redis_server) as seen:
        view = unit_view(redis_store, PID, unit, shapes.get(PID))

    named = {u for command in seen for u in re.findall(r"\bu\d{5}\b", command)}
    assert named == {unit}, sorted(named)[:10]
    whole = [c for c in seen if re.search(r"(XRANGE|XREVRANGE) \S+:stream:(timeline|bugs)", c)
             or re.search(r"HGETALL \S+:(spend|progress|project)\b", c)]
    assert whole == []
    assert len(seen) < 40, seen
    # And it shows what reading everything would.
    assert view.bugs == bugs.list(unit_id=unit) and view.bugs[0].status == "fixing"
    graph = {u: list(e) for u, e in shapes.get(PID).depends_on.items()}
    assert view.dependents == dag.dependents(graph)[unit]
    assert view.row.tokens == 200 and view.call is not None
    assert view.call.last_failure == {"test": "t", "expected": 42, "got": 41, "hint": None}
