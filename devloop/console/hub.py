"""One follower per project for every open page: it reads the project's streams once, keeps
the project's summary (summary.py) up to date from the units each change names, renders the
live fragments once per batch of changes (at most every FLUSH_S) and fans the batch out to
each page's queue. A page's cost is then a queue and a string replace, not a recompute.

A batch ("flush") carries the position before and after it. Pages are rendered at the
position of the last flush, so a page's event stream starts exactly where its HTML stands,
and a page that reconnects is replayed the flushes it missed from a ring of recent ones.
What cannot be replayed ends in a `reload` event, never in a stale page: a page that fell
QUEUE_MAX flushes behind, a position older than the ring, and a follower that fell behind
the events stream's cap (entries trimmed before it read them: it reloads its summary, and
every page reloads).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlencode

import anyio
from sse_starlette import ServerSentEvent
from starlette.concurrency import run_in_threadpool

from devloop.console import sse
from devloop.console.auth import KEY_PARAM
from devloop.console.pages import event_json
from devloop.console.shape import Shape, Shapes
from devloop.console.summary import Dot, Stats, Summary
from devloop.store import RedisStore
from devloop.store.base import StoreError
from devloop.store.livefeed import BATCH, BLOCK_MS, RETRY_S
from devloop.store.protocols_live import StreamFeed

log = logging.getLogger(__name__)

FLUSH_S = sse.FLUSH_S  # at most 4 renders a second per project, however many pages open
RING = 240  # flushes kept for pages that reconnect
RING_STATES = 20_000  # and at most this many unit states in them (a cascade's are many)
QUEUE_MAX = 64  # flushes a page may fall behind before it is told to reload
IDLE_S = 60.0  # a follower with no page left stops after this
SHAPE_CHECK_S = 5.0  # how often a quiet follower asks whether units.json changed
FEED_MAX = 60  # timeline events per flush (the feed keeps 200; a burst sends its newest)
# Links in shared fragments carry this mark where each page's key goes (auth.py): rendered
# once, keyed per page by a string replace. Random, so no text a model wrote can hold it.
KEY_MARK = "k" + secrets.token_hex(16)

Render = Callable[[str, Stats], list[tuple[str, str]]]  # (pid, stats) -> [(id, html)]


@dataclass(frozen=True)
class Flush:
    """One batch of changes as every page receives it (payloads already JSON)."""

    before: sse.Position
    after: sse.Position
    states: dict[str, str] = field(default_factory=dict)  # unit -> state event
    feed: list[str] = field(default_factory=list)
    fragments: list[tuple[str, str]] = field(default_factory=list)  # (id, JSON with KEY_MARK)
    reload: bool = False


@dataclass
class _Pending:
    """What was read since the last flush."""

    states: dict[str, str] = field(default_factory=dict)
    feed: deque[str] = field(default_factory=lambda: deque(maxlen=FEED_MAX))
    paused: bool = False  # a pause or a resume: moving units may show differently

    @property
    def any(self) -> bool:
        return bool(self.states or self.feed or self.paused)


@dataclass(eq=False)
class Subscriber:
    """One open page: the units whose states it shows (None: all), its key, its queue."""

    units: frozenset[str] | None
    key: str | None
    queue: asyncio.Queue[Flush] = field(default_factory=asyncio.Queue)
    dropped: bool = False

    def offer(self, flush: Flush) -> None:
        """Queue a flush; a page too far behind gets one reload instead of the backlog."""
        if self.dropped:
            return
        if flush.reload or self.queue.qsize() >= QUEUE_MAX:
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(replace(flush, reload=True))
            self.dropped = True
            return
        self.queue.put_nowait(flush)

    def events(self, flush: Flush) -> list[ServerSentEvent]:
        """The SSE events of a flush for this page; only the last carries the new position
        (a reconnect in the middle of a flush replays the whole flush)."""
        out = [ServerSentEvent(data=data, event="state") for unit, data in flush.states.items()
               if self.units is None or unit in self.units]
        out += [ServerSentEvent(data=data, event="feed") for data in flush.feed]
        out += [ServerSentEvent(data=keyed(data, self.key), event="fragment")
                for _, data in flush.fragments]
        if not out:
            out.append(ServerSentEvent(comment="position"))  # an empty flush still moves it
        out[-1].id = flush.after.encode()
        return out


def keyed(text: str, key: str | None) -> str:
    """Shared fragment text with this page's key in its links (no key: links without one,
    as `auth.with_key` makes them for a script)."""
    if key is None:
        for joint in ("?", "&amp;", "&"):
            text = text.replace(f"{joint}{KEY_PARAM}={KEY_MARK}", "")
        return text
    return text.replace(KEY_MARK, urlencode({KEY_PARAM: key})[len(KEY_PARAM) + 1:])


class Hub:
    """The follower of one project."""

    def __init__(self, store: RedisStore, feed: StreamFeed, shapes: Shapes, pid: str,
                 render: Render, on_end: Callable[[Hub], None]) -> None:
        self.store, self.feed, self.shapes = store, feed, shapes
        self.pid, self.render, self.on_end = pid, render, on_end
        self.events_key, self.timeline_key = feed.events(pid), feed.timeline(pid)
        self.position = sse.Position()  # where the last flush left every page
        self.read = sse.Position()  # where the follower has read to
        self.summary: Summary | None = None
        self.ring: deque[Flush] = deque()
        self._ring_states = 0
        self.subscribers: set[Subscriber] = set()
        self.pending = _Pending()
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.flushes = 0  # renders done (the tests and the benchmark count them)
        self._next_flush = 0.0
        self._idle_since: float | None = time.monotonic()
        self._shape_checked = time.monotonic()
        self._task = asyncio.create_task(self._run(), name=f"console hub {pid}")

    @property
    def shape(self) -> Shape:
        assert self.summary is not None
        return self.summary.shape

    def subscribe(self, since: sse.Position | None, units: frozenset[str] | None,
                  key: str | None) -> Subscriber:
        """A page joining at since (None: now): the flushes it missed, or a reload."""
        sub = Subscriber(units, key)
        if since is not None and since != self.position:
            missed = self._after(since)
            if missed is None:
                sub.offer(Flush(since, self.position, reload=True))
            for flush in missed or []:
                sub.offer(flush)
        self.subscribers.add(sub)
        self._idle_since = None
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        if not self.subscribers:
            self._idle_since = time.monotonic()

    def _after(self, since: sse.Position) -> list[Flush] | None:
        """The flushes after since, or None when since is not where a flush ended."""
        flushes = list(self.ring)
        for n, flush in enumerate(flushes):
            if flush.after == since:
                return flushes[n + 1:]
        if flushes and flushes[0].before == since:
            return flushes
        return None

    def stats(self) -> Stats:
        assert self.summary is not None
        return self.summary.stats()

    def dots(self, units: list[str]) -> dict[str, Dot]:
        assert self.summary is not None
        return {u: self.summary.dots[u] for u in units if u in self.summary.dots}

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task

    async def _run(self) -> None:
        try:
            await self._sync()
            if not self.ready.done():
                self.ready.set_result(None)
            while not self._idle():
                await self._step()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("console: following project %s failed", self.pid)
            if not self.ready.done():
                self.ready.set_exception(exc)
            self._broadcast(Flush(self.position, self.position, reload=True))
        finally:
            if not self.ready.done():
                self.ready.cancel()
            self.on_end(self)

    def _idle(self) -> bool:
        return self._idle_since is not None and time.monotonic() - self._idle_since > IDLE_S

    async def _sync(self) -> None:
        """Everything read afresh: the position first, so no change after it is missed."""
        start = await run_in_threadpool(sse.position_now, self.store, self.pid)
        shape = await run_in_threadpool(self.shapes.get, self.pid)
        self.summary = await run_in_threadpool(Summary.load, self.store, shape)
        self.position = self.read = start
        self.pending = _Pending()
        self.ring.clear()
        self._ring_states = 0
        self._shape_checked = time.monotonic()

    async def _resync(self) -> None:
        """Read everything again and send every page a reload."""
        before = self.position
        await self._sync()
        self._broadcast(Flush(before, self.position, reload=True))

    async def _step(self) -> None:
        now = time.monotonic()
        try:
            if self.pending.any and now >= self._next_flush:
                await self._flush()
                return
            if not self.pending.any and now - self._shape_checked > SHAPE_CHECK_S:
                self._shape_checked = now
                if await run_in_threadpool(self.shapes.digest, self.pid) != self.shape.digest:
                    await self._resync()
                    return
        except StoreError:
            await anyio.sleep(RETRY_S)  # Redis away (a restart): try again, lose nothing
            return
        block = BLOCK_MS if not self.pending.any else int((self._next_flush - now) * 1000)
        reply = await self.feed.read({self.events_key: self.read.events,
                                      self.timeline_key: self.read.timeline},
                                     max(1, min(block, BLOCK_MS)))
        for key, entries in reply or []:
            if key == self.events_key and len(entries) >= BATCH and await (
                    self.feed.trimmed_past(self.events_key, self.read.events)):
                log.warning("console: %s fell behind the events stream; reloading", self.pid)
                await self._resync()
                return
            for entry_id, fields in entries:
                self._take(key, entry_id, fields)

    def _take(self, key: bytes, entry_id: str, fields: dict[bytes, bytes]) -> None:
        if key == self.events_key:
            self.read = replace(self.read, events=entry_id)
            kind = fields.get(b"kind", b"")
            if kind in (b"state", b"cascade"):  # a cascade tells many units at once
                for event in sse.state_events(fields):
                    self.pending.states.pop(event["unit"], None)  # newest last, in write order
                    self.pending.states[event["unit"]] = event_json(event)
            elif kind in (b"paused", b"resumed"):
                self.pending.paused = True
        else:
            self.read = replace(self.read, timeline=entry_id)
            item = sse.feed_event(fields)
            if item is not None:
                self.pending.feed.append(event_json(item))

    async def _flush(self) -> None:
        """Apply a batch to the summary, render the fragments once, hand it to every page."""
        assert self.summary is not None
        batch = self.pending
        units = set(batch.states) | self.summary.stirred(batch.paused)
        update = await run_in_threadpool(self.summary.read, self.store, units)
        self.pending = _Pending()  # read: nothing is taken from the streams meanwhile
        self.summary.apply(update)
        html = await run_in_threadpool(self.render, self.pid, self.summary.stats())
        self.flushes += 1
        fragments = [(target, event_json({"target": target, "html": text}))
                     for target, text in html]
        flush = Flush(self.position, self.read, batch.states, list(batch.feed), fragments)
        self.position = self.read
        self._keep(flush)
        self._broadcast(flush)
        self._next_flush = time.monotonic() + FLUSH_S

    def _keep(self, flush: Flush) -> None:
        """Ring the flush, dropping the oldest past RING flushes or RING_STATES states."""
        self.ring.append(flush)
        self._ring_states += len(flush.states)
        while len(self.ring) > RING or (self._ring_states > RING_STATES and len(self.ring) > 1):
            self._ring_states -= len(self.ring.popleft().states)

    def _broadcast(self, flush: Flush) -> None:
        if flush.reload:
            self.ring.clear()
            self._ring_states = 0
        for sub in list(self.subscribers):
            sub.offer(flush)


async def follow(hub: Hub, sub: Subscriber) -> AsyncIterator[ServerSentEvent]:
    """A page's event stream: its flushes as they come, until it goes away or must reload."""
    try:
        while True:
            flush = await sub.queue.get()
            if flush.reload:
                yield ServerSentEvent(data="{}", event="reload", id=flush.after.encode())
                return
            for event in sub.events(flush):
                yield event
    finally:
        hub.unsubscribe(sub)


class Hubs:
    """The followers of this console, one per project some page shows."""

    def __init__(self, store: RedisStore, feed: StreamFeed, shapes: Shapes,
                 render: Render) -> None:
        self.store, self.feed, self.shapes, self.render = store, feed, shapes, render
        self._hubs: dict[str, Hub] = {}

    async def get(self, pid: str) -> Hub:
        """The project's follower, started and synced (its error if it could not sync)."""
        hub = self._hubs.get(pid)
        if hub is None:
            hub = Hub(self.store, self.feed, self.shapes, pid, self.render, self._ended)
            self._hubs[pid] = hub
        await asyncio.shield(hub.ready)
        return hub

    def running(self, pid: str) -> Hub | None:
        """The project's follower, when one runs."""
        return self._hubs.get(pid)

    def _ended(self, hub: Hub) -> None:
        if self._hubs.get(hub.pid) is hub:
            del self._hubs[hub.pid]

    async def close(self) -> None:
        for hub in list(self._hubs.values()):
            await hub.close()
