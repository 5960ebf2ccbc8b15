"""A worker (or a person's command) killed at any line of a transition leaves nothing
half-done.

decide_after runs on a store whose Redis connection dies (as the process would: nothing
after it runs) before its n-th round trip, for every n until it runs whole. Then what the
fleet does after a dead worker: the task comes back (Celery's reject_on_worker_lost) or it
does not (the whole worker died), and reconcile runs a grace period later, carrying every
chain it sends for the unit to its decision again. Whatever n, the unit ends with one loop
event for its decision, and the decision's effects beyond the unit (dependents released or
blocked, notes promoted, bugs moved to fixing) all done. A person's approve or cancel the
same, the person running the command again after it died.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from devloop.core.models import StepOutcome
from devloop.fleet.dispatch import decide_after, enqueue_project, reconcile, unblock_unit
from devloop.fleet.human import cancel_unit
from devloop.fleet.messages import StepMsg
from devloop.fleet.records import StepRecord, load_step, save_step
from devloop.fleet.review import ReviewRefused, approve_unit
from devloop.ledgers import BugLedger, Timeline
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build

PID = "p-fleet"
GRACE_S = 60.0
GREEN = StepOutcome(tester_ran=True, tests_ok=True)
RED = StepOutcome(tester_ran=True, tests_ok=False, failures=[("test_add", "got -1")],
                  hint="add() returns the difference")


class Killed(BaseException):
    """The worker process died here: no except clause of DevLoop's runs after it."""


class Lifeline:
    """Round trips a killed worker's connection still makes (None: every one)."""

    def __init__(self, left: int | None) -> None:
        self.left, self.used = left, 0

    def spend(self) -> None:
        if self.left is not None and self.used >= self.left:
            raise Killed(f"killed before round trip {self.used + 1}")
        self.used += 1


@contextlib.contextmanager
def dying_store(client: redis.Redis, line: Lifeline) -> Iterator[RedisStore]:
    """A store over a new connection to client's server that dies as line says."""
    pool = client.connection_pool
    base: Any = pool.connection_class

    class Dying(base):  # type: ignore[misc, valid-type]
        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            line.spend()
            super().send_packed_command(command, check_health)

    dying = redis.ConnectionPool(connection_class=Dying, **pool.connection_kwargs)
    try:
        yield RedisStore(redis.Redis(connection_pool=dying))
    finally:
        dying.disconnect()


def prepare(store: RedisStore, root: Path, outcome: StepOutcome) -> StepMsg:
    """a -> b -> c enqueued; a's attempt 1 coded and tested (outcome), an open bug and a
    pending note of a's coder: what decide reads."""
    project = build(root, [UnitPlan("a"), UnitPlan("b", ["a"]), UnitPlan("c", ["b"])])
    enqueue_project(store, project)
    store.put_state(PID, "a", UnitState(status="testing", attempt=1, updated_at=time.time()))
    msg = StepMsg(pid=PID, unit_id="a", attempt=1)
    for role, made in (("coder", StepOutcome()), ("tester", outcome)):
        save_step(store, PID, "a", StepRecord(role=role, attempt=1, msg=msg, worker="test",
                                              started_at=0, ended_at=0, outcome=made))
    BugLedger(store.sink(PID, "bugs")).open("a", "run-1-1", "test_add")
    store.put_pending_note(PID, "coder", "a", "adding", "add() keeps ints exact")
    return msg


def after_the_kill(store: RedisStore, msg: StepMsg, budget: int, redelivered: bool) -> None:
    """What the fleet does once the worker is gone, a grace period later."""
    if redelivered:
        decide_after(store, msg, budget)
    later = time.time() + 2 * GRACE_S
    for sent in reconcile(store, PID, GRACE_S, now=later):
        if sent.msg.unit_id == "a" and sent.msg.attempt == 1:
            decide_after(store, sent.msg, budget)  # its coder and tester steps are stored


def loop_events(store: RedisStore, unit: str) -> list[str]:
    return [e.kind for e in Timeline(store.sink(PID, "timeline")).events(unit_id=unit)
            if e.agent == "loop"]


def passed(store: RedisStore) -> None:
    assert store.get_state(PID, "a").status == "passed"
    assert loop_events(store, "a") == ["loop_release", "loop_pass"]
    assert loop_events(store, "b") == ["loop_release"]  # released once
    assert store.get_state(PID, "b").status == "coding"
    assert store.pending_notes(PID, "coder", "a") == {}
    assert list(store.memory_notes(PID, "coder")) == ["a--adding.md"]


def retried(store: RedisStore) -> None:
    assert store.get_state(PID, "a").attempt == 2
    assert loop_events(store, "a") == ["loop_release", "loop_retry_coder"]
    assert [b.status for b in BugLedger(store.sink(PID, "bugs")).list(unit_id="a")] == ["fixing"]


def blocked(store: RedisStore) -> None:
    assert store.get_state(PID, "a").status == "blocked"
    assert loop_events(store, "a") == ["loop_release", "loop_block"]
    states = store.get_states(PID, ["b", "c"])
    assert [s.status for s in states.values()] == ["blocked_upstream"] * 2


CASES: dict[str, tuple[StepOutcome, int, Callable[[RedisStore], None]]] = {
    "pass": (GREEN, 5, passed),
    "retry_coder": (RED, 5, retried),
    "block": (RED, 1, blocked),
}


@pytest.mark.parametrize("redelivered", [True, False], ids=["redelivered", "lost"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_decision_killed_before_any_round_trip_ends_whole_once_the_fleet_recovers(
    redis_client: redis.Redis, redis_store: RedisStore, tmp_path: Path, case: str,
    redelivered: bool,
) -> None:
    outcome, budget, holds = CASES[case]
    for n in range(200):
        redis_client.flushall()
        msg = prepare(redis_store, tmp_path / f"killed-{n}", outcome)
        try:
            with dying_store(redis_client, Lifeline(n)) as dying:
                decide_after(dying, msg, budget)
            killed = False
        except Killed:
            after_the_kill(redis_store, msg, budget, redelivered)
            killed = True
        with told(f"killed before round trip {n + 1}" if killed else "not killed"):
            holds(redis_store)
            assert redis_store.followups(PID) == {}
            assert load_step(redis_store, PID, "a", "decide", 1, 1) is not None
        if not killed:
            break  # n round trips are the whole decision
    assert n > 5, "the decision took fewer round trips than it has"


Act = Callable[[RedisStore], object]
PEOPLE: dict[str, tuple[UnitState, Act, Callable[[RedisStore], None]]] = {
    "approve": (UnitState(status="review", attempt=1),
                lambda store: approve_unit(store, PID, "a", by="ann"), passed),
    "cancel": (UnitState(status="testing", attempt=1),
               lambda store: cancel_unit(store, PID, "a", by="ann"), blocked),
}


@pytest.mark.parametrize("act", list(PEOPLE))
def test_a_persons_command_killed_before_any_round_trip_ends_whole_once_the_fleet_recovers(
    redis_client: redis.Redis, redis_store: RedisStore, tmp_path: Path, act: str
) -> None:
    before, command, holds = PEOPLE[act]
    for n in range(200):
        redis_client.flushall()
        prepare(redis_store, tmp_path / f"killed-{n}", GREEN)
        redis_store.put_state(PID, "a", before)
        try:
            with dying_store(redis_client, Lifeline(n)) as dying:
                command(dying)
            killed = False
        except Killed:
            with contextlib.suppress(ReviewRefused, ValueError):
                command(redis_store)  # the person runs it again: refused if it took
            reconcile(redis_store, PID, GRACE_S, now=time.time() + 2 * GRACE_S)
            killed = True
        with told(f"killed before round trip {n + 1}" if killed else "not killed"):
            holds(redis_store)
            assert redis_store.followups(PID) == {}
        if not killed:
            break
    assert n > 3, "the command took fewer round trips than it has"


@contextlib.contextmanager
def told(where: str) -> Iterator[None]:
    """An assertion that fails in here says where the worker was killed."""
    try:
        yield
    except AssertionError as broken:
        raise AssertionError(where) from broken


def test_an_overdue_follow_up_of_a_unit_that_moved_on_is_dropped_not_done(
    redis_client: redis.Redis, redis_store: RedisStore, tmp_path: Path
) -> None:
    # a is blocked, and its worker died before blocking what depends on it; a person then
    # unblocked a. The block's follow-up must not block b and c under a unit that runs again.
    for n in range(200):
        redis_client.flushall()
        msg = prepare(redis_store, tmp_path / f"killed-{n}", RED)
        with pytest.raises(Killed), dying_store(redis_client, Lifeline(n)) as dying:
            decide_after(dying, msg, 1)
        if redis_store.followups(PID):
            break
    assert redis_store.get_state(PID, "a").status == "blocked"
    unblock_unit(redis_store, PID, "a", "cover the empty list")
    reconcile(redis_store, PID, GRACE_S, now=time.time() + 2 * GRACE_S)
    states = redis_store.get_states(PID, ["a", "b", "c"])
    assert [(s.status, s.attempt) for s in states.values()] == [
        ("coding", 2), ("pending", 0), ("pending", 0)]
    assert redis_store.followups(PID) == {}
