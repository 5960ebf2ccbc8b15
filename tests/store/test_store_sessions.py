"""Session checkpoints: one JSON transcript per (role, unit), overwritten each turn."""

from __future__ import annotations

from typing import Any

from devloop.store import RedisStore


def test_sessions_round_trip_and_overwrite(redis_store: RedisStore) -> None:
    assert redis_store.load_session("p1", "coder", "u1") is None
    turn1: dict[str, Any] = {"turn": 1, "messages": [{"role": "user", "content": "héllo"}]}
    redis_store.save_session("p1", "coder", "u1", turn1)
    assert redis_store.load_session("p1", "coder", "u1") == turn1
    turn2 = {"turn": 2, "messages": [*turn1["messages"], {"role": "assistant", "content": []}]}
    redis_store.save_session("p1", "coder", "u1", turn2)
    assert redis_store.load_session("p1", "coder", "u1") == turn2
    assert redis_store.load_session("p1", "tester", "u1") is None


def test_drop_session_forgets_the_checkpoint(redis_store: RedisStore) -> None:
    redis_store.save_session("p1", "tester", "u1", {"turn": 1})
    assert redis_store.drop_session("p1", "tester", "u1")
    assert redis_store.load_session("p1", "tester", "u1") is None
    assert not redis_store.drop_session("p1", "tester", "u1")
