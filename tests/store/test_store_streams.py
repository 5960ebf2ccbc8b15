"""RedisStreamSink: the ledgers' AppendSink over a Redis stream."""

from __future__ import annotations

import threading

import pytest
import redis

from devloop.ledgers.sink import AppendSink
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, RedisStreamSink


def test_it_is_an_append_sink(redis_store: RedisStore) -> None:
    assert isinstance(redis_store.sink("p1", "bugs"), AppendSink)


def test_append_and_lines_keep_order_and_split_records(redis_store: RedisStore) -> None:
    sink = redis_store.sink("p1", "timeline")
    assert sink.lines() == []
    sink.append('{"kind":"unit_coded"}')
    sink.append('{"kind":"unit_tested"}\n')
    sink.append("---\nattempt: 1\n---")
    assert sink.lines() == [
        '{"kind":"unit_coded"}',
        '{"kind":"unit_tested"}',
        "---",
        "attempt: 1",
        "---",
    ]
    assert redis_store.sink("p1", "bugs").lines() == []


def test_concurrent_writers_lose_nothing(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    def write(worker: int) -> None:
        sink = RedisStreamSink(redis_server.client(), "devloop:p1:stream:bugs")
        for i in range(100):
            sink.append(f'{{"w":{worker},"i":{i}}}')

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    lines = RedisStreamSink(redis_client, "devloop:p1:stream:bugs").lines()
    assert len(lines) == len(set(lines)) == 400


def test_a_decoding_client_reads_the_same_lines(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    sink = RedisStreamSink(redis_server.client(decode_responses=True), "devloop:p2:stream:x")
    sink.append("é")
    assert sink.lines() == ["é"]
    assert RedisStreamSink(redis_client, "devloop:p2:stream:x").lines() == ["é"]


def test_the_store_refuses_a_decoding_client(redis_server: RedisServer) -> None:
    with pytest.raises(ValueError, match="decode_responses"):
        RedisStore(redis_server.client(decode_responses=True))
