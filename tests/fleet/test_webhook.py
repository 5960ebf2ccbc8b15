"""Calling a person: one POST per blocked or review event, retried, never twice."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.fleet.control import set_console_url
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.webhook import Notifier
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build
from tests.webhook_receiver import Receiver

PID = "p-fleet"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()


def _blocked(store: RedisStore) -> None:
    store.put_state(PID, "b", UnitState(
        status="blocked", attempt=3, blocked_reason="the same failure 3 times",
        last_hint="value() must return 42, not 41"))


def test_a_blocked_unit_is_posted_once_with_its_reason_hint_and_console_link(
    redis_store: RedisStore, tmp_path: Path, receiver: Receiver
) -> None:
    enqueue_project(redis_store, build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b")]))
    set_console_url(redis_store, PID, "http://127.0.0.1:8765")
    first = Notifier(redis_store, [PID], receiver.url, base_s=0.05).start()
    second = Notifier(redis_store, [PID], receiver.url, base_s=0.05).start()
    try:
        time.sleep(0.3)  # both follow the stream now
        redis_store.put_state(PID, "a", UnitState(status="coding", attempt=1))  # not a call
        _blocked(redis_store)
        [call] = receiver.wait_for(1, timeout_s=30)
        time.sleep(1.0)  # a second notifier, had it sent too, would have by now
    finally:
        first.stop()
        second.stop()
    assert len(receiver.calls) == 1
    assert {k: call[k] for k in ("event", "project", "unit", "status", "attempt", "reason",
                                 "hint", "console")} == {
        "event": "unit_blocked", "project": PID, "unit": "b", "status": "blocked",
        "attempt": 3, "reason": "the same failure 3 times",
        "hint": "value() must return 42, not 41",
        "console": "http://127.0.0.1:8765/p/p-fleet/u/b",
    }
    assert call["id"] and call["ts"].endswith("Z") and "last_failure" in call


def test_a_receiver_that_fails_is_retried_with_backoff(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    enqueue_project(redis_store, build(tmp_path / "p", [UnitPlan("b")]))
    flaky = Receiver(fail_first=2, fail_status=503)
    notifier = Notifier(redis_store, [PID], flaky.url, base_s=0.05).start()
    try:
        time.sleep(0.3)
        redis_store.put_state(PID, "b", UnitState(status="review", attempt=1))
        [call] = flaky.wait_for(1, timeout_s=30)
    finally:
        notifier.stop()
        flaky.close()
    assert flaky.attempts == 3 and call["event"] == "unit_review"


def test_an_event_it_cannot_read_is_skipped_and_the_next_call_still_goes_out(
    redis_store: RedisStore, tmp_path: Path, receiver: Receiver
) -> None:
    enqueue_project(redis_store, build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b")]))
    notifier = Notifier(redis_store, [PID], receiver.url, base_s=0.05).start()
    try:
        time.sleep(0.3)
        # A blocked event with no unit (anyone who reaches Redis can write one).
        redis_store.client.xadd(redis_store.keys(PID).events,
                                {"kind": "state", "status": "blocked", "attempt": 1})
        _blocked(redis_store)
        [call] = receiver.wait_for(1, timeout_s=30)
    finally:
        notifier.stop()
    assert call["unit"] == "b"
