"""One event stream per page, fed by blocking reads of the project's streams (store/livefeed.py).

A page's position is where it stands in each stream it follows, written as the SSE id
(`e=<events id>;t=<timeline id>;r=<run>;o=<output id>`): the page is rendered with the
position of what it shows, its EventSource starts from there, and a reconnect sends the
last id back (`Last-Event-ID`), so nothing is missed or shown twice.

    project page   state (a unit's status: the DAG node's colour), feed (a timeline
                   event), fragment (re-rendered stats and the "needs a human" list), from
                   the project's one follower (hub.py), shared by every page
    unit page      state, feed, fragment (the unit's head, actions and details), run (a
                   new test run started), output (a chunk of its stdout/stderr), run_end
    either         reload (what the page missed cannot be sent: it loads itself again)
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.concurrency import run_in_threadpool

from devloop.console.pages import event_json
from devloop.console.render import colours, redact
from devloop.core.ids import is_valid_id
from devloop.store import RedisStore
from devloop.store.livefeed import BATCH, BLOCK_MS
from devloop.store.output import output_chunk
from devloop.store.protocols_live import StreamFeed
from devloop.store.state import event_states
from devloop.store.streams import entry_lines

FLUSH_S = 0.25  # a page's fragments are rendered at most this often
_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


@dataclass(frozen=True)
class Position:
    """Where a page stands in each stream it follows."""

    events: str = "0-0"
    timeline: str = "0-0"
    run: str | None = None
    output: str = "0-0"

    def encode(self) -> str:
        return f"e={self.events};t={self.timeline};r={self.run or '-'};o={self.output}"

    @classmethod
    def parse(cls, text: str | None) -> Position | None:
        """A position from an SSE id or a page's `since`, or None when it is not one."""
        if not text:
            return None
        parts = dict(p.partition("=")[::2] for p in text.split(";"))
        ids = [parts.get(k, "") for k in ("e", "t", "o")]
        run = parts.get("r", "")
        if not all(_ID.match(i) for i in ids) or not (run == "-" or is_valid_id(run)):
            return None
        return cls(ids[0], ids[1], None if run == "-" else run, ids[2])


def position_now(store: RedisStore, pid: str, run: str | None = None,
                 output: str = "0-0") -> Position:
    """The newest entry of the project's events and timeline (what a page shows now)."""
    events, timeline = store.newest_ids(pid)
    return Position(events, timeline, run, output)


def _event(name: str, data: dict[str, Any], pos: Position | None) -> ServerSentEvent:
    return ServerSentEvent(data=event_json(data), event=name,
                           id=pos.encode() if pos is not None else None)


def reload_event(pos: Position) -> ServerSentEvent:
    """Tell a page it missed what cannot be replayed: it loads itself again."""
    return ServerSentEvent(data="{}", event="reload", id=pos.encode())


def state_event(fields: dict[bytes, bytes]) -> dict[str, Any]:
    """A unit's new status as the DAG node shows it."""
    status = fields.get(b"status", b"pending").decode()
    attempt = int(fields.get(b"attempt", b"0"))
    return _state_view(fields.get(b"unit", b"").decode(), status, attempt,
                       fields.get(b"scripted") == b"1")


def state_events(fields: dict[bytes, bytes]) -> list[dict[str, Any]]:
    """Every unit's new status an events entry tells (a cascade tells many)."""
    if fields.get(b"kind") == b"state":
        return [state_event(fields)]
    return [_state_view(unit, status, attempt, False)
            for unit, status, attempt in event_states(fields)]


def _state_view(unit: str, status: str, attempt: int, scripted: bool) -> dict[str, Any]:
    fill, stroke = colours(status)
    # A pass under the stub's scripted turns says so wherever the status is shown.
    chip = status.replace("_", " ") + (" (scripted)" if status == "passed" and scripted else "")
    label = chip + (f" · {attempt} attempt{'' if attempt == 1 else 's'}" if attempt else "")
    return {"unit": unit, "status": status, "attempt": attempt,
            "fill": fill, "stroke": stroke, "label": label, "chip": chip}


def feed_event(fields: dict[bytes, bytes]) -> dict[str, Any] | None:
    """A timeline entry as the feed shows it (text redacted; the page sets it as text)."""
    for line in entry_lines(fields):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            return {k: redact(str(event.get(k) or "")) for k in
                    ("ts", "kind", "unit_id", "agent", "summary")}
    return None


Fragments = Callable[[], list[tuple[str, str]]]  # -> [(element id, html)], run in a thread


async def unit_stream(
    feed: StreamFeed, pid: str, unit: str, pos: Position, fragments: Fragments,
) -> AsyncIterator[ServerSentEvent]:
    """The unit page's events (its state, its timeline, its running test's output), its
    fragments re-rendered at most every FLUSH_S; a reload when the events it follows were
    trimmed before it read them."""
    events, mine = feed.events(pid), unit.encode()
    # The unit's own timeline stream (the ledger's ids): not every unit's entries.
    timeline = await feed.unit_timeline(pid, unit)
    refresh, due = False, 0.0
    while True:
        streams = {events: pos.events, timeline: pos.timeline}
        output = feed.output(pid, unit, pos.run) if pos.run else None
        if output is not None:
            streams[output] = pos.output
        wait = BLOCK_MS if not refresh else int((due - time.monotonic()) * 1000)
        reply = await feed.read(streams, max(1, min(wait, BLOCK_MS)))
        for key, entries in reply or []:
            if key == events and len(entries) >= BATCH and await feed.trimmed_past(
                    events, pos.events):
                yield reload_event(pos)
                return
            for entry_id, fields in entries:
                if key == events:
                    pos = replace(pos, events=entry_id)
                    kind, who = fields.get(b"kind", b""), fields.get(b"unit")
                    if kind in (b"paused", b"resumed"):
                        refresh = True
                    elif kind == b"cascade":
                        for state in state_events(fields):
                            if state["unit"] == unit:
                                refresh = True
                                yield _event("state", state, pos)
                    elif who != mine:
                        continue
                    elif kind == b"state":
                        refresh = True
                        yield _event("state", state_event(fields), pos)
                    elif kind == b"output":
                        run = fields.get(b"run", b"").decode()
                        if is_valid_id(run):
                            pos = replace(pos, run=run, output="0-0")
                            yield _event("run", {"run": run}, pos)
                elif key == output:
                    pos = replace(pos, output=entry_id)
                    chunk = output_chunk(fields)
                    if chunk is not None:
                        # As the page load shows it: what looks like a credential masked.
                        yield _event("output", {"s": chunk[0], "d": redact(chunk[1])}, pos)
                    else:
                        yield _event("run_end", {"run": pos.run}, pos)
                else:
                    pos = replace(pos, timeline=entry_id)
                    item = feed_event(fields)
                    if item is not None and item["unit_id"] == unit:
                        refresh = True
                        yield _event("feed", item, pos)
        if refresh and time.monotonic() >= due:
            refresh, due = False, time.monotonic() + FLUSH_S
            for target, html in await run_in_threadpool(fragments):
                yield _event("fragment", {"target": target, "html": html}, pos)
