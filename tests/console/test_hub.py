"""The console's one follower per project (devloop/console/hub.py): every open page gets each
change from one shared render, throttled; a page that reconnects is replayed what it missed;
what cannot be replayed (a page or the follower fell behind the events stream's cap) ends
in a reload, never in a stale page."""

from __future__ import annotations

import html
import re
import time
from pathlib import Path

import pytest

from devloop.console.auth import with_key
from devloop.console.hub import KEY_MARK, QUEUE_MAX, Flush, Subscriber, keyed
from devloop.console.shape import Shapes
from devloop.console.sse import Position
from devloop.console.summary import Summary
from devloop.fleet.dispatch import block_downstream
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from devloop.store.keys import EVENTS_MAXLEN
from tests.console.served import Reader, layered, serve, wait_for

PID = "p-hub"
CODING = UnitState(status="coding", attempt=1)


def _shown(stats_html: str, count: str) -> int:
    found = re.search(rf'data-count="{count}">(\d+)', stats_html)
    assert found, stats_html
    return int(found.group(1))


@pytest.mark.timeout(120)
def test_every_open_page_gets_each_change_from_one_shared_render(
    tmp_path: Path, redis_server: RedisServer, redis_store: RedisStore
) -> None:
    units = layered(tmp_path / "p", redis_store, 12, PID, width=6)
    with serve(redis_store, redis_server.url, PID) as console:
        pages = [Reader(console.port, f"/p/{PID}/events").start() for _ in range(4)]
        try:
            hub = console.hubs.running(PID)
            assert hub is not None
            before = hub.flushes
            for unit in units[:5]:  # one change at a time, slower than the throttle
                assert redis_store.cas_state(PID, unit, "pending", 0, CODING)
                time.sleep(0.5)
            wait_for("every page's fifth update",
                     lambda: all(len(p.stats()) >= 5 for p in pages))
            assert hub.flushes - before == 5  # one render per change, not one per page
            for page in pages:
                assert [s["unit"] for s in page.named("state")] == units[:5]
                assert [_shown(s, "moving") for s in page.stats()] == [1, 2, 3, 4, 5]
            # A burst: throttled into at most two renders, every state still sent.
            before = hub.flushes
            redis_store.put_states(PID, dict.fromkeys(units[5:], CODING))
            wait_for("the burst on every page",
                     lambda: all(_shown(p.stats()[-1], "moving") == 12 for p in pages))
            assert hub.flushes - before <= 2
            for page in pages:
                assert {s["unit"] for s in page.named("state")} == set(units)
            # What the follower kept up per change is what a fresh read finds.
            fresh = Summary.load(redis_store, Shapes(redis_store).get(PID)).stats()
            assert hub.stats().tally == fresh.tally
        finally:
            for page in pages:
                page.close()


@pytest.mark.timeout(120)
def test_a_page_that_reconnects_is_replayed_what_it_missed_or_told_to_reload(
    tmp_path: Path, redis_server: RedisServer, redis_store: RedisStore
) -> None:
    units = layered(tmp_path / "p", redis_store, 6, PID, width=6)
    with serve(redis_store, redis_server.url, PID) as console:
        first = Reader(console.port, f"/p/{PID}/events").start()
        try:
            for unit in units[:3]:
                assert redis_store.cas_state(PID, unit, "pending", 0, CODING)
                time.sleep(0.5)
            wait_for("three updates", lambda: len(first.stats()) == 3)
            after_first = next(i for name, _, i in first.events if i is not None)
            # The browser comes back with the id of the last event it got.
            again = Reader(console.port, f"/p/{PID}/events", last_id=after_first).start()
            wait_for("the replay", lambda: len(again.stats()) == 2)
            assert [s["unit"] for s in again.named("state")] == units[1:3]
            # A position no flush ended at (another console's, or one long gone): reload.
            stranger = Position("1-0", "0-0").encode()
            lost = Reader(console.port, f"/p/{PID}/events", last_id=stranger).start()
            wait_for("the reload", lost.ended.is_set)
            assert [name for name, _, _ in lost.events] == ["reload"]
            again.close()
        finally:
            first.close()


@pytest.mark.timeout(180)
def test_a_console_that_fell_behind_the_events_cap_reloads_every_page(
    tmp_path: Path, redis_server: RedisServer, redis_store: RedisStore
) -> None:
    units = layered(tmp_path / "p", redis_store, 50, PID, width=10)
    with serve(redis_store, redis_server.url, PID) as console:
        page = Reader(console.port, f"/p/{PID}/events").start()
        try:
            assert redis_store.cas_state(PID, units[0], "pending", 0, CODING)
            wait_for("the first update", lambda: len(page.stats()) == 1)
            console.stall(4)  # the console is busy while a cascade outruns the stream's cap
            time.sleep(0.5)
            written = 0
            while written < EVENTS_MAXLEN + 1_000:
                attempt = 2 + written // len(units)
                redis_store.put_states(PID, dict.fromkeys(
                    units, UnitState(status="blocked_upstream", attempt=attempt)))
                written += len(units)
            assert redis_store.client.xlen(redis_store.keys(PID).events) < written
            wait_for("the reload", page.ended.is_set, 60)
            assert page.events[-1][0] == "reload"
            # Loaded again, the page shows what Redis holds.
            status, body = console.get(f"/p/{PID}")
            assert status == 200
            assert _shown(body.decode(), "blocked") == len(units)
        finally:
            page.close()


def test_a_page_too_far_behind_gets_one_reload_instead_of_its_backlog() -> None:
    sub = Subscriber(None, None)
    pos = Position()
    for _ in range(QUEUE_MAX + 5):
        sub.offer(Flush(pos, pos, states={"u": "{}"}))
    assert sub.queue.qsize() == 1 and sub.queue.get_nowait().reload and sub.dropped


@pytest.mark.parametrize("path", ["/p/x/u/y", "/p/x?page=2", "/p/x/u/y#review",
                                  "/p/x/u/y/unblock"])
@pytest.mark.parametrize("key", ["bWFjLW9mLXRoZS1zZXNzaW9u_-x", None])
def test_a_shared_fragments_links_carry_each_pages_own_key(path: str, key: str | None) -> None:
    # As the templates print a link: through with_key, then HTML-escaped in an attribute.
    shared = html.escape(with_key(path, KEY_MARK))
    assert keyed(shared, key) == html.escape(with_key(path, key))


@pytest.mark.timeout(180)
def test_a_large_projects_page_is_bounded_and_its_stream_sends_only_its_pages_units(
    tmp_path: Path, redis_server: RedisServer, redis_store: RedisStore
) -> None:
    units = layered(tmp_path / "p", redis_store, 2_000, PID)
    shape = Shapes(redis_store).get(PID)
    assert not shape.drawn and shape.pages == 8
    with serve(redis_store, redis_server.url, PID) as console:
        status, body = console.get(f"/p/{PID}")
        page = body.decode()
        assert status == 200 and len(body) < 200_000  # 2,000 units drawn weighed ~1.8 MB
        assert "data-layers" in page and '<svg id="dag"' not in page
        assert len(re.findall(r'data-unit-status="u\d+"', page)) == 250
        assert 'data-page-link="8"' in page and f"/p/{PID}/events?page=1" in page
        status, body = console.get(f"/p/{PID}?page=2")
        second = set(re.findall(r'data-unit-status="(u\d+)"', body.decode()))
        assert second == set(shape.page(2)) and units[0] not in second
        reader = Reader(console.port, f"/p/{PID}/events?page=2").start()
        try:
            on_page, elsewhere = shape.page(2)[0], shape.page(1)[0]
            redis_store.put_states(PID, {elsewhere: CODING, on_page: CODING})
            wait_for("the update", lambda: reader.stats()
                     and _shown(reader.stats()[-1], "moving") == 2)
            assert [s["unit"] for s in reader.named("state")] == [on_page]
        finally:
            reader.close()


@pytest.mark.timeout(120)
def test_a_blocked_roots_cascade_reaches_every_page_as_each_downstream_units_state(
    tmp_path: Path, redis_server: RedisServer, redis_store: RedisStore
) -> None:
    """A cascade is one events entry per batch of units: every page still gets a state
    event for each unit it moved, and the follower's tally counts them."""
    units = layered(tmp_path / "p", redis_store, 12, PID, width=4)
    with serve(redis_store, redis_server.url, PID) as console:
        page = Reader(console.port, f"/p/{PID}/events").start()
        try:
            roots = units[:4]
            redis_store.put_states(PID, {u: UnitState(status="blocked", attempt=3)
                                         for u in roots})
            moved = sorted({u for root in roots
                            for u in block_downstream(redis_store, PID, root)})
            assert moved == units[4:]
            wait_for("every moved unit's state on the page", lambda: {
                s["unit"] for s in page.named("state") if s["status"] == "blocked_upstream"
            } == set(moved))
            hub = console.hubs.running(PID)
            assert hub is not None
            fresh = Summary.load(redis_store, Shapes(redis_store).get(PID)).stats()
            wait_for("the follower's tally", lambda: hub.stats().tally == fresh.tally)
        finally:
            page.close()
