"""The run's status in memory: moved on by the events stream, checked by a sweep, and as
a full read would tell it. The decisions over what a look read (a sweep, a trimmed stream)
run on MemoryLive; what the round trips cost and a look Redis cut short, on Redis."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from devloop.fleet.dispatch import block_downstream, enqueue_project
from devloop.fleet.livestatus import LiveStatus
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, field, save_step
from devloop.fleet.status import project_status
from devloop.store import RedisStore, UnitState
from devloop.store.inmemory_live import MemoryLive
from devloop.store.keys import EVENTS_MAXLEN
from tests.fleet.builder import UnitPlan, build

UNITS = 120
MEMORY_PID = "p-live"


def project(store: RedisStore, tmp_path: Path, n: int = UNITS) -> tuple[str, list[str]]:
    """A project of n units, imported; its pid and units."""
    units = [f"u{i:03d}" for i in range(n)]
    report, _ = enqueue_project(store, build(tmp_path / "p", [UnitPlan(u) for u in units]))
    return report.pid, units


def step(store: RedisStore, pid: str, unit: str, role: str, attempt: int, tokens: int) -> None:
    """A finished step's record, as a worker saves it."""
    now = time.time()
    save_step(store, pid, unit, StepRecord(
        role=role, attempt=attempt, msg=StepMsg(pid=pid, unit_id=unit, attempt=attempt),
        worker="w1", started_at=now - 2, ended_at=now - 1, tokens=tokens))


def commands(store: RedisStore) -> dict[str, int]:
    """How many times Redis ran each command so far."""
    stats: dict[str, Any] = store.client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def test_a_look_reads_only_what_moved_and_reads_as_a_full_read(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    pid, units = project(redis_store, tmp_path)
    live = LiveStatus(redis_store, pid, sweep_s=3600)  # the sweep reads one unit a look
    first = live.load()
    assert first.status.model_dump() == project_status(redis_store, pid).model_dump()
    moved = units[5:8]
    for unit in moved:
        step(redis_store, pid, unit, "coder", 1, tokens=100)
        redis_store.put_state(pid, unit, UnitState(status="testing", attempt=1,
                                                   updated_at=time.time()))
    before = commands(redis_store)
    look = live.poll()
    used = {k: v - before.get(k, 0) for k, v in commands(redis_store).items()}
    # Its units' state and records, the sweep's one unit, the controls: not every unit.
    assert used.get("get", 0) <= len(moved) + 3, used
    assert used.get("hgetall", 0) <= len(moved) + 2, used
    assert set(moved) <= set(look.units) and look.changed
    assert sorted(r.msg.unit_id for r in look.steps) == moved  # the new records only
    full = project_status(redis_store, pid, now=time.time())
    rows = {r.unit_id: r for r in look.status.units}
    for row in full.units:  # a moving unit's elapsed time moves with the clock
        assert rows[row.unit_id].model_dump(exclude={"elapsed_s"}) == \
            row.model_dump(exclude={"elapsed_s"})
    assert rows[moved[0]].status == "testing" and rows[moved[0]].tokens == 100
    assert [r.unit_id for r in look.status.units] == units  # units.json order
    assert look.status.recent[:3] == list(reversed(moved))  # the last to change first
    quiet = live.poll()  # nothing moved since: nothing to draw or write
    assert not quiet.changed and quiet.steps == [] and quiet.units == []


def memory_project(n: int, events_cap: int = EVENTS_MAXLEN) -> tuple[MemoryLive, list[str]]:
    """A project of n units in a MemoryLive (the live status's reads, in memory)."""
    store, units = MemoryLive(events_cap), [f"u{i:03d}" for i in range(n)]
    store.put_units(MEMORY_PID, units)
    return store, units


def memory_step(store: MemoryLive, unit: str, role: str, attempt: int, tokens: int) -> None:
    """A finished step's record, kept as save_step keeps it."""
    now = time.time()
    record = StepRecord(
        role=role, attempt=attempt, msg=StepMsg(pid=MEMORY_PID, unit_id=unit, attempt=attempt),
        worker="w1", started_at=now - 2, ended_at=now - 1, tokens=tokens)
    store.put_step(MEMORY_PID, unit, field(role, attempt, 1), record.model_dump_json())


def test_a_change_no_event_announced_shows_within_a_sweep() -> None:
    store, units = memory_project(30)
    live = LiveStatus(store, MEMORY_PID, sweep_s=1.0)
    live.load()
    # Written behind the events stream's back (as a direct SET would).
    store.put_state(MEMORY_PID, units[20], UnitState(status="blocked", attempt=2),
                    announce=False)
    deadline = time.monotonic() + 10
    while live.poll().status.units[20].status != "blocked":
        assert time.monotonic() < deadline, "the sweep never read the unit again"
        time.sleep(0.1)


def test_a_look_after_the_stream_lost_events_reads_everything_again() -> None:
    # The stream keeps one event: more than it keeps come in between two looks.
    store, units = memory_project(30, events_cap=1)
    memory_step(store, units[2], "coder", 1, tokens=5)
    live = LiveStatus(store, MEMORY_PID, sweep_s=3600)
    live.load()
    memory_step(store, units[11], "coder", 1, tokens=7)
    store.put_state(MEMORY_PID, units[10], UnitState(status="blocked", attempt=2))
    store.put_state(MEMORY_PID, units[11], UnitState(status="passed", attempt=1))
    assert store.events_after(MEMORY_PID, live.cursor).trimmed  # the first one is gone
    look = live.poll()
    rows = {r.unit_id: r for r in look.status.units}
    assert rows[units[10]].status == "blocked" and rows[units[11]].status == "passed"
    # Only what is new since the last look is new (the run appends it to the folder).
    assert [(r.msg.unit_id, r.tokens) for r in look.steps] == [(units[11], 7)]


def test_a_look_cut_short_is_taken_again_from_the_same_place(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    pid, units = project(redis_store, tmp_path, n=30)
    live = LiveStatus(redis_store, pid, sweep_s=3600)
    live.load()
    redis_store.put_state(pid, units[3], UnitState(status="blocked", attempt=1))
    steps = f"{redis_store.keys(pid).prefix}unit:{units[3]}:steps"
    redis_store.client.set(steps, "not a hash")  # the look's read of the unit fails
    try:
        live.poll()
    except Exception as exc:  # noqa: BLE001 - Redis refuses HGETALL on a string
        assert "WRONGTYPE" in str(exc)
    else:
        raise AssertionError("the look did not fail")
    redis_store.client.delete(steps)
    assert live.poll().status.units[3].status == "blocked"


def test_a_cascade_entry_moves_every_unit_it_names_in_the_next_look(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    """A blocked root's downstream is told as one events entry per batch: the run's view
    shows each of its units blocked_upstream at the next look, not a sweep later."""
    plans = [UnitPlan("root")] + [UnitPlan(f"d{i:02d}", ["root"]) for i in range(40)]
    report, _ = enqueue_project(redis_store, build(tmp_path / "p", plans))
    live = LiveStatus(redis_store, report.pid, sweep_s=3600)
    live.load()
    redis_store.put_state(report.pid, "root", UnitState(status="blocked", attempt=3))
    blocked = block_downstream(redis_store, report.pid, "root")
    assert len(blocked) == 40
    look = live.poll()
    rows = {r.unit_id: r.status for r in look.status.units}
    assert {rows[u] for u in blocked} == {"blocked_upstream"} and rows["root"] == "blocked"
    assert set(blocked) <= set(look.units)
