"""The console's pages and actions (Starlette). Actions change the project through the same
library calls as the CLI and hand the chains to send (or the task ids to revoke) to the
callbacks `workers/` passes in: nothing here imports Celery."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qs

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from devloop.console import sse
from devloop.console.auth import LOOPBACK, Guard, page_key, with_key
from devloop.console.hub import KEY_MARK, Hub, Hubs, follow
from devloop.console.pages import page_units, page_view, unit_view
from devloop.console.render import render
from devloop.console.shape import Shapes
from devloop.console.summary import Stats
from devloop.core.ids import is_valid_id
from devloop.fleet.control import set_console_url
from devloop.fleet.dispatch import unblock_unit
from devloop.fleet.human import cancel_project, cancel_unit, resume_project, retry_with_spec
from devloop.fleet.messages import Dispatch
from devloop.fleet.review import NOTE_CHARS, approve_unit, request_changes_unit
from devloop.store import RedisStore
from devloop.store.livefeed import LiveFeed

FORM_CAP = 64 * 1024
BY = "a person in the console"
# What an action's redirect says (a code, never text from the request).
DONE = {
    "unblocked": "Re-queued with your hint: the coder tries again.",
    "approved": "Approved: the unit passed and its dependents were released.",
    "changes": "Changes requested: the coder retries with your note.",
    "spec": "Acceptance criteria saved: the coder tries again.",
    "cancelled": "Cancelled: sessions stop before their next turn, checkpoints kept.",
    "resumed": "Resumed from the checkpoints.",
}


@dataclass(frozen=True)
class Callbacks:
    """How the console's actions reach the workers: send chains, revoke queued tasks."""

    send: Callable[[list[Dispatch]], None]
    revoke: Callable[[list[str]], None]


@dataclass
class ConsoleConfig:
    """What one console serves, and how."""

    store: RedisStore
    redis_url: str
    token: str
    port: int
    callbacks: Callbacks
    pids: list[str] | None = None  # None: every project in this Redis
    hosts: Iterable[str] | None = LOOPBACK  # Host names it answers to (None: any)
    public_url: str | None = None  # its base URL (no token), for links in webhooks
    folder: str | None = None  # the one project's folder: the commands shown name it


def command_target(config: ConsoleConfig, pid: str) -> str:
    """What a command shown for pid names: its folder when this console serves it alone
    (`devloop resume DIR` works from any shell), else its id (for DEVLOOP_REDIS_URL)."""
    if config.folder is not None and config.pids == [pid]:
        return shlex.quote(config.folder)
    return pid


def make_app(config: ConsoleConfig) -> Guard:
    """The console as an ASGI app, behind its token and origin guard."""
    store = config.store
    feed = LiveFeed.from_url(config.redis_url)
    shapes = Shapes(store)

    def live_fragments(pid: str, stats: Stats) -> list[tuple[str, str]]:
        """The project pages' live fragments, rendered once for all of them: links carry
        KEY_MARK where each page's key goes (hub.keyed)."""
        context: dict[str, Any] = {
            "pid": pid, "tally": stats.tally, "control": stats.control, "calls": stats.calls,
            "more": stats.more, "target": command_target(config, pid),
            "link": lambda path: with_key(path, KEY_MARK)}
        return [("stats", render("_stats.html.j2", **context)),
                ("humans", render("_humans.html.j2", **context))]

    hubs = Hubs(store, feed, shapes, live_fragments)

    def known(pid: str) -> bool:
        if not is_valid_id(pid):
            return False
        # A folder's console may open before its first run imported it: no page yet, not a 500.
        listed = config.pids is None or pid in config.pids
        return listed and store.has_project(pid)

    def nonce(request: Request) -> str:
        return str(request.scope.get("state", {}).get("nonce", ""))

    def link(request: Request) -> Callable[[str], str]:
        """A console path as this browser's pages link it: with its key (auth.py)."""
        key = page_key(request.scope)
        return lambda path: with_key(path, key)

    async def index(request: Request) -> Response:
        pids = config.pids if config.pids is not None else await run_in_threadpool(
            store.project_ids)
        if len(pids) == 1:
            return RedirectResponse(link(request)(f"/p/{pids[0]}"), status_code=303)
        return HTMLResponse(render("index.html.j2", pids=pids, nonce=nonce(request),
                                   link=link(request)))

    async def project_page(request: Request) -> Response:
        pid = request.path_params["pid"]
        if not await run_in_threadpool(known, pid):
            return _missing(f"no project {pid!r} here")
        hub = await hubs.get(pid)
        page = _page(request, 1)
        # Taken together, between two flushes: the page shows exactly its position.
        shape, since, stats = hub.shape, hub.position, hub.stats()
        dots = hub.dots(page_units(shape, page))
        view = await run_in_threadpool(page_view, store, shape, dots, stats, page,
                                       since.timeline)
        keyed = link(request)
        events = f"/p/{pid}/events" + ("" if shape.drawn else f"?page={view.page}")
        return HTMLResponse(render(
            "project.html.j2", v=view, since=since.encode(), nonce=nonce(request),
            done=DONE.get(request.query_params.get("done", "")),
            target=command_target(config, pid), link=keyed, events=events,
            unit_href=lambda unit: keyed(f"/p/{pid}/u/{unit}"),
        ))

    async def human_page(request: Request) -> Response:
        pid = request.path_params["pid"]
        if not await run_in_threadpool(known, pid):
            return _missing(f"no project {pid!r} here")
        hub = await hubs.get(pid)
        since, stats = hub.position, hub.stats()
        return HTMLResponse(render(
            "human.html.j2", pid=pid, calls=stats.calls, more=stats.more, since=since.encode(),
            nonce=nonce(request), done=DONE.get(request.query_params.get("done", "")),
            link=link(request),
        ))

    async def unit_page(request: Request) -> Response:
        pid, unit = request.path_params["pid"], request.path_params["unit"]
        if not await run_in_threadpool(known, pid) or not is_valid_id(unit):
            return _missing(f"no project {pid!r} here")
        first = await run_in_threadpool(sse.position_now, store, pid)
        try:
            view = await run_in_threadpool(lambda: unit_view(store, pid, unit, shapes.get(pid)))
        except KeyError:
            return _missing(f"no unit {unit!r} in {pid}")
        since = replace(first, run=view.output.run_id, output=view.output.last_id)
        return HTMLResponse(render(
            "unit.html.j2", v=view, since=since.encode(), nonce=nonce(request),
            done=DONE.get(request.query_params.get("done", "")), link=link(request),
        ))

    async def project_events(request: Request) -> Response:
        pid = request.path_params["pid"]
        if not await run_in_threadpool(known, pid):
            return _missing(f"no project {pid!r} here")
        hub = await hubs.get(pid)
        since = _since(request)
        sub = hub.subscribe(since, _watched(request, hub), page_key(request.scope))
        return _events(follow(hub, sub))

    async def unit_events(request: Request) -> Response:
        pid, unit = request.path_params["pid"], request.path_params["unit"]
        if not await run_in_threadpool(known, pid) or not is_valid_id(unit):
            return _missing(f"no project {pid!r} here")

        def now() -> sse.Position:
            run = store.latest_output_run(pid, unit)
            return sse.position_now(store, pid, run, store.read_output(pid, unit, run).last_id)

        pos = await _position(request, now)
        keyed = link(request)

        def fragments() -> list[tuple[str, str]]:
            view = unit_view(store, pid, unit, shapes.get(pid))
            return [(name, render(f"_unit_{name}.html.j2", v=view, link=keyed))
                    for name in ("head", "actions", "details")]

        return _events(sse.unit_stream(feed, pid, unit, pos, fragments))

    def action(work: Callable[[str, str, dict[str, str]], str]) -> Callable[..., Any]:
        """A POST handler: run work(pid, unit, form) in a thread, redirect with its code."""

        async def handle(request: Request) -> Response:
            pid = request.path_params["pid"]
            unit = request.path_params.get("unit", "")
            if not await run_in_threadpool(known, pid) or (unit and not is_valid_id(unit)):
                return _missing(f"no project {pid!r} here")
            form = await _form(request)
            try:
                code = await run_in_threadpool(work, pid, unit, form)
            except ValueError as exc:
                return HTMLResponse(render("refused.html.j2", why=str(exc), pid=pid, unit=unit,
                                           nonce=nonce(request), link=link(request)),
                                    status_code=409)
            # Back to the page the form was on (a fixed choice, never a URL from the form).
            on_unit = unit and form.get("back") != "project"
            back = f"/p/{pid}/u/{unit}" if on_unit else f"/p/{pid}"
            return RedirectResponse(link(request)(f"{back}?done={code}"), status_code=303)

        return handle

    send, revoke = config.callbacks.send, config.callbacks.revoke

    def do_unblock(pid: str, unit: str, form: dict[str, str]) -> str:
        hint = form.get("hint", "").strip()[:NOTE_CHARS]
        send(unblock_unit(store, pid, unit, hint or None))
        return "unblocked"

    def do_approve(pid: str, unit: str, form: dict[str, str]) -> str:
        send(approve_unit(store, pid, unit, BY))
        return "approved"

    def do_changes(pid: str, unit: str, form: dict[str, str]) -> str:
        send(request_changes_unit(store, pid, unit, form.get("note", ""), BY))
        return "changes"

    def do_spec(pid: str, unit: str, form: dict[str, str]) -> str:
        criteria = form.get("criteria", "").splitlines()
        send(retry_with_spec(store, pid, unit, criteria, form.get("note", ""), BY))
        return "spec"

    def do_cancel(pid: str, unit: str, form: dict[str, str]) -> str:
        revoke(cancel_unit(store, pid, unit, BY) if unit else cancel_project(store, pid, BY))
        return "cancelled"

    def do_resume(pid: str, unit: str, form: dict[str, str]) -> str:
        raw = form.get("max_usd", "").strip()
        try:
            cap = float(raw) if raw else None
        except ValueError:
            raise ValueError(f"max_usd: {raw!r} is not a number of dollars") from None
        if cap is not None and cap <= 0:
            raise ValueError("max_usd: give a cap above 0 (or leave it empty)")
        send(resume_project(store, pid, cap))
        return "resumed"

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if config.public_url:
            pids = config.pids if config.pids is not None else store.project_ids()
            for pid in pids:
                set_console_url(store, pid, config.public_url)
        try:
            yield
        finally:
            await hubs.close()
            await feed.close()

    unit_path = "/p/{pid}/u/{unit}"
    routes = [
        Route("/", index),
        Route("/p/{pid}", project_page),
        Route("/p/{pid}/events", project_events),
        Route("/p/{pid}/human", human_page),
        Route("/p/{pid}/cancel", action(do_cancel), methods=["POST"]),
        Route("/p/{pid}/resume", action(do_resume), methods=["POST"]),
        Route(unit_path, unit_page),
        Route(unit_path + "/events", unit_events),
        Route(unit_path + "/unblock", action(do_unblock), methods=["POST"]),
        Route(unit_path + "/approve", action(do_approve), methods=["POST"]),
        Route(unit_path + "/changes", action(do_changes), methods=["POST"]),
        Route(unit_path + "/spec", action(do_spec), methods=["POST"]),
        Route(unit_path + "/cancel", action(do_cancel), methods=["POST"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.hubs = hubs  # the followers (tests/console/test_hub.py counts their renders)
    return Guard(app, config.token, config.port, config.hosts)


def _since(request: Request) -> sse.Position | None:
    """Where the page stands: the browser's Last-Event-ID, else the page's `since`."""
    for candidate in (request.headers.get("last-event-id"), request.query_params.get("since")):
        pos = sse.Position.parse(candidate)
        if pos is not None:
            return pos
    return None


async def _position(request: Request, now: Callable[[], sse.Position]) -> sse.Position:
    """Where the stream starts: the browser's Last-Event-ID, the page's `since`, or now."""
    since = _since(request)
    return since if since is not None else await run_in_threadpool(now)


def _page(request: Request, default: int) -> int:
    """The `page` query parameter (of the layers of a large project)."""
    raw = request.query_params.get("page", "")
    return int(raw) if raw.isdigit() and len(raw) < 7 else default


def _watched(request: Request, hub: Hub) -> frozenset[str] | None:
    """The units whose states a page's stream sends: every unit of a drawn DAG, the units of
    the page of layers it shows, none for `page=0` (the needs-a-human page)."""
    page = _page(request, 1)
    if page == 0:
        return frozenset()
    if hub.shape.drawn:
        return None
    return frozenset(page_units(hub.shape, page))


def _events(stream: AsyncIterator[Any]) -> Response:
    return EventSourceResponse(stream, ping=15, headers={"X-Accel-Buffering": "no"})


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form body (capped), first value of each field."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_CAP:
            break
    fields = parse_qs(body[:FORM_CAP].decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


def _missing(why: str) -> Response:
    return HTMLResponse(f"<!DOCTYPE html><title>not found</title><p>{_escape(why)}</p>",
                        status_code=404)


def _escape(text: str) -> str:
    from html import escape

    return escape(text)
