"""Leases: one live owner per (unit, attempt, role); heartbeats only by the owner."""

from __future__ import annotations

import time

from devloop.store import RedisStore

LEASE = ("p1", "u1", 1, "coder")


def test_a_second_acquire_fails_while_the_lease_lives(redis_store: RedisStore) -> None:
    assert redis_store.acquire_lease(*LEASE, owner="w1", ttl_s=5)
    assert not redis_store.acquire_lease(*LEASE, owner="w2", ttl_s=5)
    assert redis_store.lease_owner(*LEASE) == "w1"
    # Other attempts and roles have their own leases.
    assert redis_store.acquire_lease("p1", "u1", 2, "coder", owner="w2", ttl_s=5)
    assert redis_store.acquire_lease("p1", "u1", 1, "tester", owner="w2", ttl_s=5)


def test_an_expired_lease_can_be_taken(redis_store: RedisStore) -> None:
    assert redis_store.acquire_lease(*LEASE, owner="w1", ttl_s=0.2)
    time.sleep(0.3)
    assert redis_store.lease_owner(*LEASE) is None
    assert redis_store.acquire_lease(*LEASE, owner="w2", ttl_s=5)
    assert not redis_store.heartbeat(*LEASE, owner="w1", ttl_s=5)


def test_heartbeat_extends_only_for_the_owner(redis_store: RedisStore) -> None:
    # TTLs read back, not slept through: a loaded machine may pause this test for seconds.
    key = redis_store.keys(LEASE[0]).lease(*LEASE[1:])
    assert redis_store.acquire_lease(*LEASE, owner="w1", ttl_s=30)
    assert not redis_store.heartbeat(*LEASE, owner="w2", ttl_s=600)
    assert redis_store.client.pttl(key) <= 30_000  # w2 extended nothing
    assert redis_store.heartbeat(*LEASE, owner="w1", ttl_s=600)
    assert redis_store.client.pttl(key) > 30_000  # the owner's heartbeat did
    assert redis_store.lease_owner(*LEASE) == "w1"
    assert redis_store.acquire_lease(*LEASE, owner="w1", ttl_s=5)  # re-entrant for its owner


def test_release_only_by_the_owner(redis_store: RedisStore) -> None:
    redis_store.acquire_lease(*LEASE, owner="w1", ttl_s=5)
    assert not redis_store.release(*LEASE, owner="w2")
    assert redis_store.lease_owner(*LEASE) == "w1"
    assert redis_store.release(*LEASE, owner="w1")
    assert redis_store.lease_owner(*LEASE) is None
    assert redis_store.acquire_lease(*LEASE, owner="w2", ttl_s=5)


def test_a_queued_release_also_frees_only_the_owners_lease(redis_store: RedisStore) -> None:
    redis_store.acquire_lease(*LEASE, owner="w1", ttl_s=5)
    with redis_store.client.pipeline(transaction=False) as pipe:
        redis_store.queue_release(pipe, *LEASE, owner="w2")
        assert pipe.execute() == [0]
    assert redis_store.lease_owner(*LEASE) == "w1"
    with redis_store.client.pipeline(transaction=False) as pipe:
        redis_store.queue_release(pipe, *LEASE, owner="w1")
        assert pipe.execute() == [1]
    assert redis_store.lease_owner(*LEASE) is None
