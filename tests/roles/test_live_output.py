"""Live test output: chunks reach the store as they are read, a cap per run, the last N runs
kept. On MemoryLive: that RedisStore keeps output the same way is
tests/store/test_live_contract.py's part."""

from __future__ import annotations

import time

import pytest

from devloop.roles.live_output import LiveOutput
from devloop.store.inmemory_live import MemoryLive
from devloop.store.protocols_live import LiveStore

PID = "p-out"


@pytest.fixture
def store() -> LiveStore:
    return MemoryLive()


def test_chunks_reach_the_stream_while_the_run_is_still_going(store: LiveStore) -> None:
    with LiveOutput(store, PID, "u", "run-1-1", cap_bytes=1000, keep=5,
                    flush_s=0.05) as live:
        live("stdout", b"tick 1\n")
        live("stderr", "caf\xc3".encode("latin-1"))  # half a UTF-8 character...
        live("stderr", b"\xa9\n")  # ...and its end: decoded whole
        deadline = time.monotonic() + 10
        while not store.read_output(PID, "u", "run-1-1").chunks:
            assert time.monotonic() < deadline, "no chunk flushed while the run went on"
            time.sleep(0.02)
        assert not store.read_output(PID, "u", "run-1-1").ended
    done = store.read_output(PID, "u", "run-1-1")
    assert done.ended and "tick 1\n" in done.text and "café\n" in done.text
    kinds = [f[b"kind"] for _, f in store.events_after(PID, "0-0").entries]
    assert kinds == [b"output", b"output_end"]


def test_a_run_is_capped_with_a_marker(store: LiveStore) -> None:
    with LiveOutput(store, PID, "u", "run-1-1", cap_bytes=10, keep=5) as live:
        live("stdout", b"0123456789abcdef")
        live("stdout", b"more")
    text = store.read_output(PID, "u", "run-1-1").text
    assert text.startswith("0123456789") and "capped at 10 bytes" in text and "more" not in text


def test_half_a_character_at_the_end_of_a_run_is_not_lost(store: LiveStore) -> None:
    with LiveOutput(store, PID, "u", "run-1-1", cap_bytes=100, keep=5) as live:
        live("stdout", b"caf\xc3")  # the run ended inside a character
    assert store.read_output(PID, "u", "run-1-1").text == "caf\ufffd"


def test_only_the_last_n_runs_of_a_unit_are_kept(store: LiveStore) -> None:
    for n in range(1, 5):
        with LiveOutput(store, PID, "u", f"run-{n}-1", cap_bytes=100, keep=2) as live:
            live("stdout", f"run {n}\n".encode())
    assert store.latest_output_run(PID, "u") == "run-4-1"
    assert store.output_runs(PID, "u") == ["run-4-1", "run-3-1"]
    assert store.read_output(PID, "u", "run-2-1").chunks == []  # its stream is gone
    assert store.read_output(PID, "u", "run-3-1").text == "run 3\n"
