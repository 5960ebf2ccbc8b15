"""The console's blocking stream reads: LiveFeed on a real server and MemoryFeed give the same
answers, and a unit page's stream (console/sse.py) decides on what they read."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from devloop.console import sse
from devloop.ledgers import Timeline
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from devloop.store.inmemory_live import MemoryFeed, MemoryLive
from devloop.store.keys import EVENTS_MAXLEN
from devloop.store.livefeed import LiveFeed
from devloop.store.protocols_live import StreamFeed

PID = "p-feed"


@dataclass
class Rig:
    """A feed, the store it reads, and how a test writes what the feed must see."""

    make_feed: Callable[[], StreamFeed]  # in the event loop that reads it
    store: RedisStore | MemoryLive
    timeline: Callable[[str], None]  # append one timeline event for unit u
    fill_past_cap: Callable[[], str]  # the oldest event id, once the stream trimmed it


def _redis_rig(server: RedisServer, store: RedisStore) -> Rig:
    def fill() -> str:
        first = store.add_event(PID, {"kind": "x"})
        with store.client.pipeline(transaction=False) as pipe:
            for _ in range(EVENTS_MAXLEN + 10):
                pipe.xadd(store.keys(PID).events, {"kind": "x"}, maxlen=EVENTS_MAXLEN,
                          approximate=False)
            pipe.execute()
        return first

    timeline = Timeline(store.sink(PID, "timeline"))
    return Rig(lambda: LiveFeed.from_url(server.url), store,
               lambda unit: timeline.append("note", unit_id=unit, agent="human", summary="hi"),
               fill)


def _memory_rig() -> Rig:
    live = MemoryLive(events_cap=300)

    def fill() -> str:
        first = live.add_event(PID, {"kind": "x"})
        for _ in range(400):
            live.add_event(PID, {"kind": "x"})
        return first

    def note(unit: str) -> None:
        live.append_timeline(PID, json.dumps({"ts": "t", "kind": "note", "unit_id": unit,
                                              "agent": "human", "summary": "hi"}))

    return Rig(lambda: MemoryFeed(live), live, note, fill)


@pytest.fixture(params=["redis", "memory"])
def rig(request: pytest.FixtureRequest) -> Rig:
    if request.param == "redis":
        return _redis_rig(request.getfixturevalue("redis_server"),
                          request.getfixturevalue("redis_store"))
    return _memory_rig()


def run(rig: Rig, read: Callable[[StreamFeed], Awaitable[Any]]) -> Any:
    """What read gives, on a feed made (and closed) in one event loop of a thread of its
    own (a browser test before it on the same worker may leave a loop running in this one)."""
    async def main() -> Any:
        feed = rig.make_feed()
        try:
            return await read(feed)
        finally:
            await feed.close()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(anyio.run, main).result(timeout=60)


def test_a_read_gives_each_streams_entries_after_its_position_or_none_after_the_wait(
        rig: Rig) -> None:
    store = rig.store
    first = store.add_event(PID, {"kind": "state", "unit": "u", "status": "coding",
                                  "attempt": 1})
    second = store.add_event(PID, {"kind": "paused"})
    store.start_output(PID, "u", "run-1-1", keep=2)
    store.add_output(PID, "u", "run-1-1", {"stdout": "hi\n"})
    feed = rig.make_feed()
    events, output = feed.events(PID), feed.output(PID, "u", "run-1-1")
    reply = dict(run(rig, lambda f: f.read({events: first, output: "0-0"}, 100)) or [])
    assert [i for i, _ in reply[events]][0] == second
    assert [f[b"kind"] for _, f in reply[events]] == [b"paused", b"output"]
    assert [f[b"d"] for _, f in reply[output]] == [b"hi\n"]
    last = reply[events][-1][0]
    started = time.monotonic()
    assert run(rig, lambda f: f.read({events: last}, 300)) is None
    assert time.monotonic() - started >= 0.25  # it waited


def test_a_blocked_read_wakes_when_an_entry_lands(rig: Rig) -> None:
    store = rig.store
    last = store.add_event(PID, {"kind": "x"})
    late = threading.Timer(0.3, lambda: store.add_event(PID, {"kind": "late"}))
    late.start()
    try:
        reply = run(rig, lambda f: f.read({f.events(PID): last}, 5_000))
    finally:
        # The reader wakes as the entry lands, maybe before the writer has read Redis's
        # reply: the writer ends before the test does (a failed read too), or the store's
        # teardown closes its connection under it.
        late.join(10)
    assert reply is not None and [f[b"kind"] for _, f in reply[0][1]] == [b"late"]


def test_a_position_the_stream_trimmed_away_is_told_and_one_still_there_is_not(
        rig: Rig) -> None:
    store = rig.store
    events = rig.make_feed().events(PID)
    kept = store.add_event(PID, {"kind": "x"})
    assert not run(rig, lambda f: f.trimmed_past(events, kept))
    gone = rig.fill_past_cap()
    assert run(rig, lambda f: f.trimmed_past(events, gone))
    assert not run(rig, lambda f: f.trimmed_past(events, store.last_event_id(PID)))


async def _page(feed: StreamFeed, pos: sse.Position, want: int,
                write: Callable[[], None]) -> list[tuple[str, dict[str, Any]]]:
    """The first `want` events the unit page of "u" gets once `write` ran."""
    got: list[tuple[str, dict[str, Any]]] = []
    stream = sse.unit_stream(feed, PID, "u", pos, lambda: [("head", "<p>")])
    with anyio.fail_after(20):
        write()
        async for event in stream:
            got.append((str(event.event), json.loads(str(event.data))))
            if len(got) >= want or event.event == "reload":
                break
    await stream.aclose()  # type: ignore[attr-defined]
    return got


def test_a_unit_page_gets_its_units_changes_its_runs_output_and_nothing_of_others(
        rig: Rig) -> None:
    store = rig.store
    pos = sse.Position(events=store.add_event(PID, {"kind": "start"}))

    def write() -> None:
        store.add_event(PID, {"kind": "state", "unit": "other", "status": "coding",
                              "attempt": 1})
        store.add_event(PID, {"kind": "state", "unit": "u", "status": "testing", "attempt": 2})
        store.add_event(PID, {"kind": "cascade", "status": "blocked_upstream", "by": "r",
                              "units": "v u", "attempts": "1 2"})
        store.start_output(PID, "u", "run-2-1", keep=2)
        rig.timeline("other")
        rig.timeline("u")

    got = run(rig, lambda f: _page(f, pos, 5, write))
    names = [name for name, _ in got if name != "fragment"]
    states = [data for name, data in got if name == "state"]
    assert [(s["unit"], s["status"]) for s in states] == [("u", "testing"),
                                                          ("u", "blocked_upstream")]
    assert ("run", {"run": "run-2-1"}) in got and "reload" not in names
    assert all(data.get("unit", data.get("unit_id", "u")) == "u" for _, data in got)


def test_a_unit_page_that_fell_behind_the_events_cap_is_told_to_reload(rig: Rig) -> None:
    behind = sse.Position(events=rig.fill_past_cap())
    got = run(rig, lambda f: _page(f, behind, 1, lambda: None))
    assert got[-1][0] == "reload"


def test_a_units_state_write_reaches_its_page_as_the_node_shows_it(rig: Rig) -> None:
    store = rig.store
    pos = sse.Position(events=store.add_event(PID, {"kind": "start"}))
    got = run(rig, lambda f: _page(f, pos, 1, lambda: store.put_state(
        PID, "u", UnitState(status="passed", attempt=1, scripted=True))))
    assert got[0] == ("state", {"unit": "u", "status": "passed", "attempt": 1,
                                "fill": got[0][1]["fill"], "stroke": got[0][1]["stroke"],
                                "label": "passed (scripted) · 1 attempt",
                                "chip": "passed (scripted)"})
