"""The console's walls, on a real uvicorn server over a real Redis (no workers): the token,
the host and origin checks, the headers, escaping and redaction of what it shows."""

from __future__ import annotations

import http.client
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import uvicorn
from playwright.sync_api import Browser

from devloop.console import Callbacks, ConsoleConfig, make_app
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.messages import Dispatch
from devloop.fleet.output import output_key
from devloop.ledgers import Timeline
from devloop.redis_server import RedisServer
from devloop.store import RedisStore, UnitState
from tests.console.conftest import free_port
from tests.fleet.builder import UnitPlan, build

PID = "p-fleet"
TOKEN = "t0ken-for-tests-0123456789"
EVIL = ('<img src=x onerror="document.body.dataset.owned=1">'
        "<script>document.body.dataset.owned=1</script>")


@dataclass
class Served:
    port: int
    store: RedisStore
    sent: list[Dispatch] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)

    def request(self, method: str, path: str, headers: dict[str, str] | None = None,
                body: str = "") -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request(method, path, body=body or None, headers={
            "Host": f"127.0.0.1:{self.port}", **(headers or {})})
        return conn.getresponse()

    @property
    def cookie(self) -> dict[str, str]:
        return {"Cookie": f"devloop_console_{self.port}={TOKEN}"}


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
    handle = Served(free_port(), store)
    app = make_app(ConsoleConfig(
        store=store, redis_url=redis_server.url, token=TOKEN, port=handle.port,
        callbacks=Callbacks(send=handle.sent.extend, revoke=handle.revoked.extend),
        pids=[PID],
    ))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=handle.port,
                                           log_level="warning", timeout_graceful_shutdown=1))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the console did not start"
        time.sleep(0.05)
    try:
        yield handle
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        store.close()


def test_the_link_moves_the_token_into_an_httponly_strict_cookie(served: Served) -> None:
    reply = served.request("GET", f"/p/{PID}?token={TOKEN}&x=1")
    assert reply.status == 303 and reply.getheader("Location") == f"/p/{PID}?x=1"
    cookie = reply.getheader("Set-Cookie") or ""
    assert cookie.startswith(f"devloop_console_{served.port}={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie


@pytest.mark.parametrize("path", [f"/p/{PID}", f"/p/{PID}/u/a", f"/p/{PID}/events", "/",
                                  f"/p/{PID}/human", f"/p/{PID}/u/a/events"])
def test_every_page_and_stream_without_the_token_is_refused(served: Served, path: str) -> None:
    assert served.request("GET", path).status == 403
    assert served.request("GET", f"{path}{'&' if '?' in path else '?'}token=wrong").status == 403
    assert served.request("GET", path, {"Cookie": f"devloop_console_{served.port}=wrong"}
                          ).status == 403


def test_an_unknown_host_is_refused_even_with_the_token(served: Served) -> None:
    reply = served.request("GET", f"/p/{PID}", {**served.cookie, "Host": "evil.example"})
    assert reply.status == 400


def test_a_post_from_another_origin_or_none_changes_nothing(served: Served) -> None:
    path = f"/p/{PID}/u/a/unblock"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for origin in ({"Origin": "http://evil.example"},
                   {"Origin": f"http://127.0.0.1:{served.port + 1}"},
                   {"Origin": "null"}, {}):
        reply = served.request("POST", path, {**served.cookie, **form, **origin}, "hint=x")
        assert reply.status == 403, origin
    assert served.sent == [] and served.store.get_state(PID, "a").status == "blocked"
    same = {"Origin": f"http://127.0.0.1:{served.port}"}
    reply = served.request("POST", path, {**served.cookie, **form, **same}, "hint=return+42")
    assert reply.status == 303 and reply.getheader("Location") == f"/p/{PID}/u/a?done=unblocked"
    assert [(d.msg.unit_id, d.msg.attempt) for d in served.sent] == [("a", 4)]
    assert served.store.get_state(PID, "a").last_hint == "return 42"


def test_a_post_without_an_origin_is_judged_by_its_referer(served: Served) -> None:
    path = f"/p/{PID}/u/a/unblock"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    for referer in ("http://evil.example/p", f"http://127.0.0.1:{served.port + 1}/p/{PID}"):
        reply = served.request("POST", path, {**served.cookie, **form, "Referer": referer},
                               "hint=x")
        assert reply.status == 403, referer
    assert served.sent == []
    own = {"Referer": f"http://127.0.0.1:{served.port}/p/{PID}/u/a", "Origin": "null"}
    reply = served.request("POST", path, {**served.cookie, **form, **own}, "hint=return+42")
    assert reply.status == 303 and [d.msg.unit_id for d in served.sent] == ["a"]


def test_pages_carry_a_nonce_csp_and_escape_and_redact_what_they_show(served: Served) -> None:
    reply = served.request("GET", f"/p/{PID}/u/a", served.cookie)
    page = reply.read().decode()
    csp = reply.getheader("Content-Security-Policy") or ""
    [nonce] = re.findall(r"script-src 'nonce-([^']+)'", csp)
    assert "frame-ancestors 'none'" in csp and "form-action 'self'" in csp
    assert reply.getheader("X-Frame-Options") == "DENY"
    assert re.findall(r"<script[^>]*>", page) == [f'<script nonce="{nonce}">']
    again = served.request("GET", f"/p/{PID}/u/a", served.cookie)
    assert nonce not in (again.getheader("Content-Security-Policy") or "")  # fresh each time
    assert "<img" not in page and "&lt;img src=x" in page
    assert "hunter2secret" not in page and "sk-ant-api03" not in page
    assert "redis://***@10.0.0.5" in page
    for path in (f"/p/{PID}", f"/p/{PID}/human"):
        shown = served.request("GET", path, served.cookie).read().decode()
        assert 'data-call="a"' in shown and "<img" not in shown and TOKEN not in shown


def test_live_test_output_is_redacted_as_the_page_load_is(served: Served) -> None:
    run = "run-3-1"
    served.store.client.xadd(output_key(served.store, PID, "a", run),
                             {"s": "stdout", "d": "key sk-ant-api03-abcdefghijk printed\n"})
    since = f"e=0-0;t=0-0;r={run};o=0-0"
    reply = served.request("GET", f"/p/{PID}/u/a/events",
                           {**served.cookie, "Last-Event-ID": since})
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
