"""A blocked unit's downstream and a reconcile pass: round trips and events that do not grow
with the project."""

from __future__ import annotations

from pathlib import Path

import pytest

from devloop.console.sse import state_events
from devloop.fleet.dispatch import block_downstream, reconcile, unblock_unit
from devloop.project.load import load_project
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from devloop.store.state import CASCADE_BATCH, event_states
from tests.fleet.builder import UnitPlan, build
from tests.roundtrips import Counted

PID = "p-fleet"
N = 1200  # more than two batches of a cascade


@pytest.fixture
def big(redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path) -> Counted:
    """A project of N units in layers of 50 below one root, imported; a round-trip counting
    store over the same (flushed) Redis."""
    ids = ["root"] + [f"u{i:04d}" for i in range(N - 1)]
    plans = [UnitPlan(u, [ids[i - 50] if i >= 50 else "root"] if i else [])
             for i, u in enumerate(ids)]
    redis_store.import_project(load_project(build(tmp_path / "p", plans)))
    return Counted(redis_server)


def _events(store: RedisStore) -> list[dict[bytes, bytes]]:
    return [fields for _id, fields in store.client.xrange(store.keys(PID).events)]


def _calls(store: RedisStore, command: str) -> int:
    """How many times the server ran command so far (from scripts too)."""
    return int(store.client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_a_blocked_root_marks_its_downstream_in_a_few_round_trips_and_events(
    big: Counted,
) -> None:
    big.put_state(PID, "u0007", UnitState(status="passed", attempt=1))
    big.put_state(PID, "u0060", UnitState(status="failed", attempt=2, extra={"k": "v"}))
    before, sets = len(_events(big)), _calls(big, "set")
    with big.count() as trips:
        blocked = block_downstream(big, PID, "root")
    assert trips.n <= 4  # the record's version, the states, one pipeline of scripts
    assert _calls(big, "set") - sets == len(blocked) > 2 * CASCADE_BATCH  # each state once
    assert blocked == sorted(f"u{i:04d}" for i in range(N - 1) if i != 7)
    states = big.get_states(PID, blocked)
    assert {s.status for s in states.values()} == {"blocked_upstream"}
    assert {s.extra["blocked_by"] for s in states.values()} == {"root"}
    assert states["u0060"].attempt == 2 and states["u0060"].extra["k"] == "v"
    assert big.get_state(PID, "u0007").status == "passed"  # a passed unit stays passed
    cascades = _events(big)[before:]
    assert len(cascades) == -(-len(blocked) // CASCADE_BATCH)  # one entry per batch
    told = [change for fields in cascades for change in event_states(fields)]
    assert sorted(told) == sorted((u, "blocked_upstream", states[u].attempt) for u in blocked)


def test_unblocking_the_root_makes_its_downstream_pending_again(big: Counted) -> None:
    big.put_state(PID, "root", UnitState(status="blocked", attempt=3, blocked_reason="red"))
    block_downstream(big, PID, "root")
    before = len(_events(big))
    with big.count() as trips:
        unblock_unit(big, PID, "root", "try the other way")
    assert trips.n <= 15  # not one per unit
    assert {s.status for s in big.get_states(PID, [f"u{i:04d}" for i in range(N - 1)])
            .values()} == {"pending"}
    told = [c for fields in _events(big)[before:] for c in event_states(fields)]
    assert sum(1 for _, status, _ in told if status == "pending") == N - 1


def test_a_cascade_leaves_a_unit_that_moved_since_it_was_read(big: Counted) -> None:
    read = UnitState()
    big.put_state(PID, "u0001", UnitState(status="coding", attempt=1))  # moved meanwhile
    moved = big.cascade_states(PID, "blocked_upstream", "root", {
        u: (read, UnitState(status="blocked_upstream")) for u in ("u0000", "u0001")})
    assert moved == ["u0000"]
    assert big.get_state(PID, "u0001").status == "coding"
    assert event_states(_events(big)[-1]) == [("u0000", "blocked_upstream", 0)]


def test_reconcile_reads_the_whole_project_in_a_few_round_trips(big: Counted) -> None:
    ids = [f"u{i:04d}" for i in range(N - 1)]
    big.put_states(PID, {"root": UnitState(status="passed", attempt=1),
                         **{u: UnitState(status="passed", attempt=1) for u in ids[:-60]},
                         ids[-60]: UnitState(status="coding", attempt=1, updated_at=1.0)})
    big.acquire_lease(PID, ids[-60], 1, "coder", "a live worker", 30)
    with big.count() as trips:
        sent = reconcile(big, PID, grace_s=60, now=1000.0)
    # The units whose dependencies all passed start; the leased one is left alone.
    ready = [u for i, u in enumerate(ids) if i >= N - 61 and i < N - 11 and u != ids[-60]]
    assert [d.msg.unit_id for d in sent] == ready
    assert trips.n <= 12 + len(ready)  # a timeline event per start; nothing else per unit
    assert {big.get_state(PID, u).status for u in ready} == {"coding"}


def test_reading_the_project_record_again_asks_for_its_version_alone(big: Counted) -> None:
    first = big.project_record(PID)
    calls = big.client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
    with big.count() as trips:
        again = [big.project_record(PID) for _ in range(5)]
    assert trips.n == 5 and all(r is first for r in again)
    assert big.client.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0) == calls
    assert first.dependents["root"] == ["u0000", *(f"u{i:04d}" for i in range(1, 50))]


def test_the_project_record_is_read_again_when_an_import_changes_its_version(
    big: Counted, tmp_path: Path,
) -> None:
    first = big.project_record(PID)
    plans = [UnitPlan("root"), UnitPlan("extra", ["root"])]
    big.import_project(load_project(build(tmp_path / "changed", plans)))
    reads = _calls(big, "hgetall")
    changed = big.project_record(PID)
    assert changed.version != first.version and _calls(big, "hgetall") == reads + 1
    assert list(changed.graph) == ["root", "extra"] and changed.dependents["root"] == ["extra"]
    assert big.project_record(PID) is changed and _calls(big, "hgetall") == reads + 1


def test_the_console_colours_every_unit_a_cascade_tells_of(big: Counted) -> None:
    blocked = block_downstream(big, PID, "root")
    shown = [s for fields in _events(big) for s in state_events(fields)]
    assert sorted(s["unit"] for s in shown) == blocked
    assert {(s["status"], s["chip"], s["label"]) for s in shown} == {
        ("blocked_upstream", "blocked upstream", "blocked upstream")}
