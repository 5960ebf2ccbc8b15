"""The console's walls, on a real uvicorn server over a real Redis (no workers): the token,
the cookie and its key, the host and origin checks, the headers, escaping and redaction of
what it shows."""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import uvicorn
from playwright.sync_api import Browser

from devloop.console.app import Callbacks, ConsoleConfig, make_app
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.messages import Dispatch
from devloop.ledgers import Timeline
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from tests.console.conftest import free_port
from tests.fleet.builder import UnitPlan, build

PID = "p-fleet"
TOKEN = "t0ken-for-tests-0123456789"
EVIL = ('<img src=x onerror="document.body.dataset.owned=1">'
        "<script>document.body.dataset.owned=1</script>")


@dataclass(frozen=True)
class Session:
    """What a browser holds after opening the link: the cookie and the key of its URLs."""

    cookie: str  # the session id
    key: str
    port: int

    @property
    def headers(self) -> dict[str, str]:
        return {"Cookie": f"devloop_console_{self.port}={self.cookie}"}

    def path(self, path: str) -> str:
        return f"{path}{'&' if '?' in path else '?'}key={self.key}"


@dataclass
class Served:
    port: int
    store: RedisStore
    sent: list[Dispatch] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None

    def close(self) -> None:
        """Stop the server (its port is free afterwards)."""
        if self.server is not None and self.thread is not None:
            self.server.should_exit = True
            self.thread.join(timeout=30)

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                body: str = "") -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request(method, path, body=body or None, headers={
            "Host": f"127.0.0.1:{self.port}", **(headers or {})})
        return conn.getresponse()

    def login(self, headers: dict[str, str] | None = None) -> Session:
        """Open the printed link (with the browser's cookies, if any): its cookie and key."""
        reply = self.request("GET", f"/p/{PID}?token={TOKEN}", headers)
        assert reply.status == 303, reply.read()
        [key] = parse_qs(urlsplit(reply.getheader("Location") or "").query)["key"]
        cookie = (reply.getheader("Set-Cookie") or "").split(";")[0].partition("=")[2]
        return Session(cookie, key, self.port)

    def get(self, session: Session, path: str) -> http.client.HTTPResponse:
        return self.request("GET", session.path(path), session.headers)


@contextmanager
def console_on(store: RedisStore, redis_url: str, port: int) -> Iterator[Served]:
    """A console (a fresh app, as a new `devloop console` makes) on port until the block ends."""
    handle = Served(port, store)
    app = make_app(ConsoleConfig(
        store=store, redis_url=redis_url, token=TOKEN, port=handle.port,
        callbacks=Callbacks(send=handle.sent.extend, revoke=handle.revoked.extend),
        pids=[PID],
    ))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=handle.port,
                                           log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    handle.server, handle.thread = server, thread
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the console did not start"
        time.sleep(0.05)
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def served(redis_server: RedisServer, tmp_path: Path) -> Iterator[Served]:
    """A console on a free port over the session's Redis, with one blocked unit whose text
    is hostile markup and whose error holds secrets."""
    client = redis_server.client()
    client.flushall()
    store = RedisStore(client)
    enqueue_project(store, build(tmp_path / "p", [UnitPlan("a"), UnitPlan("b", ["a"])]))
    store.put_state(PID, "a", UnitState(
        status="blocked", attempt=3, blocked_reason=f"the same failure 3 times {EVIL}",
        last_hint=EVIL,
        last_error="redis://:hunter2secret@10.0.0.5:6379/0 said no; key sk-ant-api03-abcdefghijk"))
    Timeline(store.sink(PID, "timeline")).append("loop_block", unit_id="a", agent="loop",
                                                 summary=EVIL)
    try:
        with console_on(store, redis_server.url, free_port()) as handle:
            yield handle
    finally:
        store.close()


def test_the_link_trades_the_token_for_a_cookie_and_a_key_that_open_nothing_alone(
    served: Served,
) -> None:
    reply = served.request("GET", f"/p/{PID}?token={TOKEN}&x=1")
    location = reply.getheader("Location") or ""
    assert reply.status == 303 and location.startswith(f"/p/{PID}?x=1&key=")
    assert TOKEN not in location
    cookie = reply.getheader("Set-Cookie") or ""
    assert cookie.startswith(f"devloop_console_{served.port}=") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    session = served.login()
    assert served.get(session, f"/p/{PID}").status == 200
    # The cookie is what every other port of the host receives: alone it opens nothing.
    alone = served.request("GET", f"/p/{PID}", session.headers)
    assert alone.status == 403 and "open the link" in alone.read().decode()
    # The key is what a URL copied out of the address bar carries: alone, nothing either.
    assert served.request("GET", session.path(f"/p/{PID}")).status == 403
    other = served.login()  # another browser: its key does not go with this cookie
    assert served.request("GET", other.path(f"/p/{PID}"), session.headers).status == 403
    # The same browser opening the link again keeps its session (its other tabs work on).
    again = served.login(session.headers)
    assert again == session
    scripted = served.request("GET", f"/p/{PID}", {"X-DevLoop-Token": TOKEN})
    assert scripted.status == 200  # scripts send the token itself, as a header


def test_a_console_started_again_honours_no_earlier_browsers_cookie_and_key(
    served: Served, redis_server: RedisServer
) -> None:
    session = served.login()
    assert served.get(session, f"/p/{PID}").status == 200
    port = served.port
    # A console started again on that port once it is free, with the same token
    # (DEVLOOP_CONSOLE_TOKEN): the first one's cookie and key open nothing there.
    served.close()
    with console_on(served.store, redis_server.url, port) as second:
        refused = second.get(session, f"/p/{PID}")
        assert refused.status == 403 and "open the link" in refused.read().decode()
        assert second.get(second.login(), f"/p/{PID}").status == 200


@pytest.mark.parametrize("path", [f"/p/{PID}", f"/p/{PID}/u/a", f"/p/{PID}/events", "/",
                                  f"/p/{PID}/human", f"/p/{PID}/u/a/events"])
def test_every_page_and_stream_without_the_token_is_refused(served: Served, path: str) -> None:
    assert served.request("GET", path).status == 403
    assert served.request("GET", f"{path}{'&' if '?' in path else '?'}token=wrong").status == 403
    assert served.request("GET", path, {"Cookie": f"devloop_console_{served.port}=wrong"}
                          ).status == 403
    session = served.login()
    assert served.request("GET", path, session.headers).status == 403  # the cookie alone
    assert served.request("GET", f"{path}{'&' if '?' in path else '?'}key={session.key}x",
                          session.headers).status == 403
    assert served.request("GET", path, {"Cookie": f"devloop_console_{served.port}={TOKEN}"}
                          ).status == 403  # the token is no cookie


def test_an_unknown_host_is_refused_even_with_the_token(served: Served) -> None:
    session = served.login()
    reply = served.request("GET", session.path(f"/p/{PID}"),
                           {**session.headers, "Host": "evil.example"})
    assert reply.status == 400


def test_a_post_from_another_origin_or_none_changes_nothing(served: Served) -> None:
    session = served.login()
    path = session.path(f"/p/{PID}/u/a/unblock")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for origin in ({"Origin": "http://evil.example"},
                   {"Origin": f"http://127.0.0.1:{served.port + 1}"},
                   {"Origin": "null"}, {}):
        reply = served.request("POST", path, {**session.headers, **form, **origin}, "hint=x")
        assert reply.status == 403, origin
    same = {"Origin": f"http://127.0.0.1:{served.port}"}
    keyless = served.request("POST", f"/p/{PID}/u/a/unblock", {**session.headers, **form,
                                                               **same}, "hint=x")
    assert keyless.status == 403  # the same origin, the cookie, but not the key
    assert served.sent == [] and served.store.get_state(PID, "a").status == "blocked"
    reply = served.request("POST", path, {**session.headers, **form, **same}, "hint=return+42")
    assert reply.status == 303
    assert reply.getheader("Location") == session.path(f"/p/{PID}/u/a?done=unblocked")
    assert [(d.msg.unit_id, d.msg.attempt) for d in served.sent] == [("a", 4)]
    assert served.store.get_state(PID, "a").last_hint == "return 42"


def test_a_post_without_an_origin_is_judged_by_its_referer(served: Served) -> None:
    session = served.login()
    path = session.path(f"/p/{PID}/u/a/unblock")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for referer in ("http://evil.example/p", f"http://127.0.0.1:{served.port + 1}/p/{PID}"):
        reply = served.request("POST", path, {**session.headers, **form, "Referer": referer},
                               "hint=x")
        assert reply.status == 403, referer
    assert served.sent == []
    own = {"Referer": f"http://127.0.0.1:{served.port}/p/{PID}/u/a", "Origin": "null"}
    reply = served.request("POST", path, {**session.headers, **form, **own}, "hint=return+42")
    assert reply.status == 303 and [d.msg.unit_id for d in served.sent] == ["a"]


def test_pages_carry_a_nonce_csp_and_escape_and_redact_what_they_show(served: Served) -> None:
    session = served.login()
    reply = served.get(session, f"/p/{PID}/u/a")
    page = reply.read().decode()
    csp = reply.getheader("Content-Security-Policy") or ""
    [nonce] = re.findall(r"script-src 'nonce-([^']+)'", csp)
    assert "frame-ancestors 'none'" in csp and "form-action 'self'" in csp
    assert reply.getheader("X-Frame-Options") == "DENY"
    assert re.findall(r"<script[^>]*>", page) == [f'<script nonce="{nonce}">']
    again = served.get(session, f"/p/{PID}/u/a")
    assert nonce not in (again.getheader("Content-Security-Policy") or "")  # fresh each time
    assert "<img" not in page and "&lt;img src=x" in page
    assert "hunter2secret" not in page and "sk-ant-api03" not in page
    assert "redis://***@10.0.0.5" in page
    for path in (f"/p/{PID}", f"/p/{PID}/human"):
        shown = served.get(session, path).read().decode()
        assert 'data-call="a"' in shown and "<img" not in shown and TOKEN not in shown
        # Every link and form of the page carries the key (auth.py); none leaves the console.
        targets = re.findall(r'(?:href|action)="([^"]*)"', shown)
        assert targets and all(t.startswith("/") and f"key={session.key}" in t
                               for t in targets), targets
    assert served.get(session, f"/p/{PID}").getheader("Referrer-Policy") == "same-origin"


def test_live_test_output_is_redacted_as_the_page_load_is(served: Served) -> None:
    run = "run-3-1"
    served.store.add_output(PID, "a", run, {"stdout": "key sk-ant-api03-abcdefghijk printed\n"})
    since = f"e=0-0;t=0-0;r={run};o=0-0"
    session = served.login()
    reply = served.request("GET", session.path(f"/p/{PID}/u/a/events"),
                           {**session.headers, "Last-Event-ID": since})
    assert reply.status == 200
    deadline = time.monotonic() + 30
    while (line := reply.fp.readline().decode()) and "printed" not in line:
        assert time.monotonic() < deadline, "no output event"
    assert "sk-ant-***" in line and "sk-ant-api03" not in line
    reply.close()


@pytest.mark.timeout(120)
def test_injected_markup_stays_text_in_the_browser_pages_and_live_events(
    served: Served, browser: Browser
) -> None:
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{served.port}/p/{PID}?token={TOKEN}")
        page.wait_for_selector('body[data-live="1"]', timeout=30_000)
        # Live: a hostile timeline entry and a state change reach the open page.
        Timeline(served.store.sink(PID, "timeline")).append("loop_block", unit_id="b",
                                                            agent="loop", summary=EVIL)
        served.store.put_state(PID, "b", UnitState(status="blocked_upstream"))
        page.wait_for_selector('g[data-unit="b"][data-status="blocked_upstream"]',
                               timeout=30_000)
        page.locator("#feed li", has_text="onerror").first.wait_for(timeout=30_000)
        assert page.locator("img").count() == 0
        assert page.evaluate("document.body.dataset.owned") is None  # nothing ran
        assert page.locator("script").count() == 1
    finally:
        context.close()
