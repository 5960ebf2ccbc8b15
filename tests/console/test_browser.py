"""The console in real headless Chromium, on one live stub-driven `devloop run --console`:
colours change without a reload, a running test's stdout streams in, a blocked unit calls a
person (page and webhook) and a hint unblocks it, a review unit waits for its approval, and
requests without the token or from another origin are refused, and a server on another port
that the signed-in browser visits gets nothing that opens the console.

The tests share the run and follow its story in file order; each waits for what it needs.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext

from tests.conftest import REPO
from tests.console.conftest import PID, LiveConsole, open_page, wait_until
from tests.workers.runproc import DEVLOOP, clean_env
from tests.workers.test_flower import listen_addresses

SCREENSHOT = REPO / "bench" / "out" / "console.png"
WAIT_MS = 180_000


@pytest.mark.timeout(240)
def test_a_request_without_the_token_is_refused(browser: Browser, live: LiveConsole) -> None:
    stranger = browser.new_context()
    try:
        page = stranger.new_page()
        response = page.goto(live.url())
        assert response is not None and response.status == 403
        assert "no token" in page.content()
        wrong = page.goto(f"{live.base}/?token=not-{live.token}")
        assert wrong is not None and wrong.status == 403
        refused = page.request.post(live.url("/cancel"), headers={"Origin": live.base})
        assert refused.status == 403  # right origin, but no token
    finally:
        stranger.close()
    assert _paused(live) is None


def test_the_console_listens_on_loopback_and_gets_its_token_by_environment_only(
    live: LiveConsole,
) -> None:
    port = int(live.base.rsplit(":", 1)[1])
    assert listen_addresses(port) == {"0100007F"}  # 127.0.0.1 only, nothing on tcp6
    [console] = [p for p in live.run.children() if "workers.main" in p.cmdline
                 and " console " in p.cmdline and f"--port {port}" in p.cmdline]
    assert live.token not in console.cmdline
    environ = Path(f"/proc/{console.pid}/environ").read_bytes().split(b"\0")
    assert f"DEVLOOP_CONSOLE_TOKEN={live.token}".encode() in environ
    # The run printed the link once; the console's own log has the URL alone.
    assert live.run.output().count(live.token) == 1
    # The run binds the port and prints the link before its console child has logged its
    # start, so on a busy machine the log may still be empty here.
    log = live.project / ".devloop" / "console.log"
    wait_until("console log naming its URL", lambda: live.base in log.read_text(), 60)
    assert live.token not in log.read_text()


@pytest.mark.timeout(240)
def test_a_cross_origin_post_is_refused_even_with_the_cookie(
    signed_in: BrowserContext, live: LiveConsole
) -> None:
    # Another port of the same host is the same site: the SameSite cookie goes along (the
    # page's key does not), and the Origin check refuses the forged form first.
    evil = _serve(f"""<!DOCTYPE html><form method="post" action="{live.url('/cancel')}">
        </form><script>document.forms[0].submit()</script>""")
    try:
        page = signed_in.new_page()
        with page.expect_response(live.url("/cancel")) as posted:
            page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        assert posted.value.status == 403
        assert "cross-origin" in posted.value.text()
        api = signed_in.request.post(live.url("/cancel"),
                                     headers={"Origin": "http://evil.example"})
        assert api.status == 403
    finally:
        evil.shutdown()
        evil.server_close()
    assert _paused(live) is None


@pytest.mark.timeout(300)
def test_the_dag_colours_change_as_units_pass_without_a_reload(
    signed_in: BrowserContext, live: LiveConsole
) -> None:
    page = open_page(signed_in, live.url())
    node = 'g[data-unit="a"]'
    assert page.get_attribute(node, "data-status") != "passed", "opened too late"
    page.evaluate("window.__same_page = 1")
    page.wait_for_selector(f'{node}[data-status="passed"]', timeout=WAIT_MS)
    assert page.get_attribute(f"{node} rect", "fill") == "#dcfce7"
    assert "passed" in (page.text_content(f'{node} [data-role="status"]') or "")
    assert page.evaluate("window.__same_page") == 1  # updated in place, never reloaded
    assert page.locator("#feed li").count() > 0


@pytest.mark.timeout(400)
def test_a_screenshot_of_the_console_is_written(
    signed_in: BrowserContext, live: LiveConsole
) -> None:
    page = open_page(signed_in, live.url())
    page.wait_for_selector('[data-call="gate"][data-call-status="review"]', timeout=WAIT_MS)
    page.wait_for_selector('[data-call="stuck"][data-call-status="blocked"]', timeout=WAIT_MS)
    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=False)
    data = SCREENSHOT.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1400, 1000)


@pytest.mark.timeout(400)
def test_a_review_unit_waits_and_its_approval_in_the_page_releases_its_dependent(
    signed_in: BrowserContext, live: LiveConsole
) -> None:
    project = open_page(signed_in, live.url())
    project.wait_for_selector('[data-call="gate"][data-call-status="review"]', timeout=WAIT_MS)
    assert project.get_attribute('g[data-unit="slow"]', "data-status") == "pending"
    call = _call(live, "gate", "unit_review")
    assert call["console"] == live.url("/u/gate")

    page = open_page(signed_in, call["console"])  # the webhook's link: no key in it
    diff = page.text_content("#diff") or ""
    assert "code/unit.py" in diff and "+    return 42" in diff and "tests/test_unit.py" in diff
    assert "acceptance criteria 100%" in (page.text_content("[data-coverage]") or "")
    code_coverage = page.text_content("[data-code-coverage]") or ""
    assert "coverage of code/: lines 100%" in code_coverage
    assert project.get_attribute('g[data-unit="slow"]', "data-status") == "pending"
    page.click('form[data-form="approve"] button')
    page.wait_for_selector(".done", timeout=30_000)
    assert page.get_attribute('[data-unit-status="gate"]', "data-status") == "passed"
    project.wait_for_selector('g[data-unit="slow"]:not([data-status="pending"])',
                              timeout=WAIT_MS)


@pytest.mark.timeout(400)
def test_a_running_tests_stdout_appears_in_the_unit_page_while_it_runs(
    signed_in: BrowserContext, live: LiveConsole
) -> None:
    if _status(live, "gate") == "review":  # the test before did not get to approve it
        subprocess.run([DEVLOOP, "review", str(live.project), "gate", "--approve"],
                       env=clean_env(), check=True, capture_output=True, timeout=120)
    page = open_page(signed_in, live.url("/u/slow"))
    # (wait_for_function would eval a string: the page's CSP refuses that, as it should.)
    page.locator("#output", has_text="tick 1").wait_for(timeout=WAIT_MS)
    so_far = page.text_content("#output") or ""
    assert "tick 20" not in so_far  # seen while the test still ran, not after it
    assert page.get_attribute('[data-unit-status="slow"]', "data-status") == "testing"
    page.locator("#output", has_text="tick 20").wait_for(timeout=90_000)
    page.wait_for_selector('[data-unit-status="slow"][data-status="passed"]', timeout=WAIT_MS)


ATTACKER_UID = 4242  # another local user (not 65534, the sandbox's)


@pytest.mark.timeout(240)
def test_a_page_on_another_port_receives_nothing_that_opens_the_console(
    signed_in: BrowserContext, live: LiveConsole
) -> None:
    console = open_page(signed_in, live.url())
    keys = parse_qs(urlsplit(console.url).query).get("key", [])
    with _snoop(live) as elsewhere:  # another user's server on 127.0.0.1
        # The person leaves a console page for it (a Referer would go along), then opens it
        # in a tab of its own; each time its page reports what it sees and the server
        # replays what it received against the console.
        console.evaluate(f"window.location.href = {json.dumps(elsewhere.url)}")
        wait_until("the first replay", lambda: elsewhere.count("replayed") >= 1, 60)
        signed_in.new_page().goto(elsewhere.url)
        wait_until("the second replay", lambda: elsewhere.count("replayed") >= 2, 60)
    got = json.dumps([r for r in elsewhere.records if r["kind"] == "request"])
    assert live.token not in got and not any(key in got for key in keys)
    cookie = f"devloop_console_{int(live.base.rsplit(':', 1)[1])}="
    assert cookie in got  # the browser did hand it the console's cookie: it opens nothing
    replays = [r for r in elsewhere.records if r["kind"] == "replay"]
    assert len(replays) >= 8 and all(r["status"] in (401, 403) for r in replays), replays
    assert _paused(live) is None


@dataclass
class _Snooping:
    """tests/console/snoop.py running as another uid: its URL and what it printed."""

    url: str
    records: list[dict[str, Any]]

    def count(self, kind: str) -> int:
        return sum(1 for r in self.records if r["kind"] == kind)


@contextmanager
def _snoop(live: LiveConsole) -> Iterator[_Snooping]:
    """snoop.py as another local user (uid 4242 when the tests run as root), its source
    handed over by -c (a checkout in a 0700 dir is out of that uid's reach)."""
    source = (Path(__file__).parent / "snoop.py").read_text()
    as_other = (["setpriv", f"--reuid={ATTACKER_UID}", f"--regid={ATTACKER_UID}",
                 "--clear-groups"] if os.geteuid() == 0 else [])
    port = live.base.rsplit(":", 1)[1]
    proc = subprocess.Popen([*as_other, "/usr/bin/python3", "-I", "-c", source, port, PID],
                            stdout=subprocess.PIPE, text=True, cwd="/")
    records: list[dict[str, Any]] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            records.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_until("the other user's server", lambda: bool(records), 30)
        if as_other:  # it is another uid's process indeed
            status = Path(f"/proc/{proc.pid}/status").read_text()
            assert f"Uid:\t{ATTACKER_UID}\t" in status
        yield _Snooping(f"http://127.0.0.1:{records[0]['port']}/", records)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=10)


@pytest.mark.timeout(500)
def test_a_blocked_unit_is_called_and_a_hint_from_the_page_makes_it_pass(
    signed_in: BrowserContext, live: LiveConsole
) -> None:
    page = open_page(signed_in, live.url())
    card = '[data-call="stuck"][data-call-status="blocked"]'
    page.wait_for_selector(card, timeout=WAIT_MS)
    assert "the same failure 3 times" in (page.text_content(card) or "")
    call = _call(live, "stuck", "unit_blocked")
    assert call["reason"] == ("the same failure 3 times: tests/test_unit.py::"
                              "test_value_returns_42 got 41 (attempts 1-3)")
    assert call["attempt"] == 3
    assert call["last_failure"]["test"].endswith("test_value_returns_42")
    assert call["hint"] and call["console"] == live.url("/u/stuck")
    page.fill(f'{card} textarea[name="hint"]', "value() must return 42: return 42, not 41")
    page.click(f'{card} form[data-form="unblock"] button')
    page.wait_for_selector(".done", timeout=30_000)
    page.wait_for_selector('g[data-unit="stuck"][data-status="passed"]', timeout=WAIT_MS)
    unit = open_page(signed_in, live.url("/u/stuck"))
    assert unit.locator('[data-attempt-card="4"]').count() == 1
    assert _state(live)["stuck"]["last_hint"] == "value() must return 42: return 42, not 41"


def _call(live: LiveConsole, unit: str, event: str) -> dict[str, Any]:
    """The webhook call for this unit and event (waiting for it)."""
    found: list[dict[str, Any]] = []

    def arrived() -> bool:
        found[:] = [c for c in live.receiver.calls if c["unit"] == unit and c["event"] == event]
        return bool(found)

    wait_until(f"{event} webhook call for {unit}", arrived, 60)
    assert len(found) == 1, found  # never twice for one event
    assert live.receiver.bad_signatures == []  # each call signed with DEVLOOP_WEBHOOK_SECRET
    return found[0]


def _state(live: LiveConsole) -> dict[str, dict[str, Any]]:
    done = subprocess.run([DEVLOOP, "status", str(live.project), "--json"], env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    status = json.loads(done.stdout)
    return {u["unit_id"]: {**u, "_paused": status["paused"]} for u in status["units"]}


def _status(live: LiveConsole, unit: str) -> str:
    return str(_state(live)[unit]["status"])


def _paused(live: LiveConsole) -> str | None:
    paused = next(iter(_state(live).values()))["_paused"]
    return str(paused) if paused else None


def _serve(html: str) -> ThreadingHTTPServer:
    """A page on another origin (another port of 127.0.0.1)."""
    body = html.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
