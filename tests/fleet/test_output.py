"""Live test output in Redis: chunks as they are read, a cap per run, the last N runs kept."""

from __future__ import annotations

import time

from devloop.fleet.output import LiveOutput, latest_run, read_output, runs_key
from devloop.store import RedisStore

PID = "p-out"


def test_chunks_reach_the_stream_while_the_run_is_still_going(redis_store: RedisStore) -> None:
    with LiveOutput(redis_store, PID, "u", "run-1-1", cap_bytes=1000, keep=5,
                    flush_s=0.05) as live:
        live("stdout", b"tick 1\n")
        live("stderr", "caf\xc3".encode("latin-1"))  # half a UTF-8 character...
        live("stderr", b"\xa9\n")  # ...and its end: decoded whole
        deadline = time.monotonic() + 10
        while not read_output(redis_store, PID, "u", "run-1-1").chunks:
            assert time.monotonic() < deadline, "no chunk flushed while the run went on"
            time.sleep(0.02)
        assert not read_output(redis_store, PID, "u", "run-1-1").ended
    done = read_output(redis_store, PID, "u", "run-1-1")
    assert done.ended and "tick 1\n" in done.text and "café\n" in done.text
    kinds = [f[b"kind"] for _, f in redis_store.client.xrange(redis_store.keys(PID).events)]
    assert kinds == [b"output", b"output_end"]


def test_a_run_is_capped_with_a_marker(redis_store: RedisStore) -> None:
    with LiveOutput(redis_store, PID, "u", "run-1-1", cap_bytes=10, keep=5) as live:
        live("stdout", b"0123456789abcdef")
        live("stdout", b"more")
    text = read_output(redis_store, PID, "u", "run-1-1").text
    assert text.startswith("0123456789") and "capped at 10 bytes" in text and "more" not in text


def test_half_a_character_at_the_end_of_a_run_is_not_lost(redis_store: RedisStore) -> None:
    with LiveOutput(redis_store, PID, "u", "run-1-1", cap_bytes=100, keep=5) as live:
        live("stdout", b"caf\xc3")  # the run ended inside a character
    assert read_output(redis_store, PID, "u", "run-1-1").text == "caf\ufffd"


def test_only_the_last_n_runs_of_a_unit_are_kept(redis_store: RedisStore) -> None:
    for n in range(1, 5):
        with LiveOutput(redis_store, PID, "u", f"run-{n}-1", cap_bytes=100, keep=2) as live:
            live("stdout", f"run {n}\n".encode())
    assert latest_run(redis_store, PID, "u") == "run-4-1"
    assert [r.decode() for r in redis_store.client.lrange(runs_key(redis_store, PID, "u"), 0, -1)
            ] == ["run-4-1", "run-3-1"]
    assert read_output(redis_store, PID, "u", "run-2-1").chunks == []  # its stream is gone
    assert read_output(redis_store, PID, "u", "run-3-1").text == "run 3\n"
