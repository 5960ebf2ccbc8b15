"""Releasing dependents: exactly once, however many dependencies finish at the same moment."""

from __future__ import annotations

import threading
from pathlib import Path

from devloop.fleet.dispatch import enqueue_project, reconcile, release_dependents
from devloop.fleet.messages import Dispatch
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build


def test_n_dependencies_finishing_at_once_release_their_dependent_once(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    roots = [f"r{i}" for i in range(12)]
    plans = [UnitPlan(r) for r in roots] + [UnitPlan("sink", roots)]
    _, started = enqueue_project(redis_store, build(tmp_path / "p", plans))
    assert sorted(d.msg.unit_id for d in started) == sorted(roots)
    released: list[Dispatch] = []
    barrier = threading.Barrier(len(roots))

    def finish(unit: str) -> None:
        barrier.wait()
        released.extend(release_dependents(redis_store, "p-fleet", unit))

    threads = [threading.Thread(target=finish, args=(r,)) for r in roots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [d.msg.unit_id for d in released] == ["sink"]
    assert redis_store.get_state("p-fleet", "sink").status == "coding"


def test_a_second_enqueue_resumes_instead_of_starting_over(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    project = build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b", ["a"])])
    _, first = enqueue_project(redis_store, project)
    _, second = enqueue_project(redis_store, project)
    assert [d.msg.unit_id for d in first] == ["a"] and second == []


def test_reconcile_resends_stalled_units_and_ready_ones(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    project = build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b", ["a"]), UnitPlan("c")])
    enqueue_project(redis_store, project)
    # "a" passed but its release was lost; "c" was mid-coding when its worker vanished.
    redis_store.put_state("p-fleet", "a", UnitState(status="passed", attempt=1))
    redis_store.put_state("p-fleet", "c", UnitState(status="coding", attempt=1, updated_at=1))
    first = reconcile(redis_store, "p-fleet", grace_s=60, now=10)
    assert [d.msg.unit_id for d in first] == ["b"]  # ready; "c" not idle long enough yet
    again = reconcile(redis_store, "p-fleet", grace_s=60, now=1000)
    assert [(d.msg.unit_id, d.msg.attempt) for d in again] == [("c", 1)]
    redis_store.acquire_lease("p-fleet", "c", 1, "coder", "someone", 30)
    assert [d.msg.unit_id for d in reconcile(redis_store, "p-fleet", 60, now=2000)] == []
