"""Fixtures for the console's browser tests: Debian's chromium driven by Playwright (the
system executable: nothing is downloaded), and one live stub-driven `devloop run --console`
shared by every test of the session, with a local webhook receiver."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

from tests.fleet.builder import UnitPlan, build, script
from tests.report.conftest import chromium_path
from tests.webhook_receiver import Receiver
from tests.workers.runproc import RunProcess, clean_env

PID = "p-console"
WEBHOOK_SECRET = "console-tests-webhook-secret-0123456789abcdef"
# Chromium as root on these machines, closed network (see tests/report/browser.py).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Prints a tick a second for 20 s: a test whose stdout must show up in the unit page as it
# runs (long enough for a page opened on a loaded machine to see it before the last tick).
TICKING_TESTS = (
    "import time\n\nfrom unit import value\n\n\n"
    "def test_value_returns_42_while_ticking():\n"
    "    for n in range(1, 21):\n"
    "        print(f'tick {n}', flush=True)\n"
    "        time.sleep(1)\n"
    "    assert value() == 42\n"
)
PLANS = [
    UnitPlan("a", coder_latency_ms={1: 12_000}),  # passes while the project page is open
    UnitPlan("stuck", coder=["bad", "bad", "bad", "good"]),  # blocks; a hint makes it pass
    UnitPlan("gate", review="required"),  # waits for a person's approval
    UnitPlan("slow", ["gate"], tests_text=TICKING_TESTS),  # released only by that approval
]


@dataclass
class LiveConsole:
    """The run, its console and the webhook receiver."""

    run: RunProcess
    base: str
    token: str
    receiver: Receiver
    project: Path

    def url(self, path: str = "") -> str:
        return f"{self.base}/p/{PID}{path}"


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as driver:
        yield driver


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    """Headless Debian chromium (apt-installed when missing; FAILS, never skips, if not)."""
    launched = playwright.chromium.launch(executable_path=chromium_path("console"),
                                          headless=True, args=FLAGS)
    try:
        yield launched
    finally:
        launched.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveConsole]:
    """`devloop run --console` on a scripted python project, with DEVLOOP_WEBHOOK_URL."""
    project = build(tmp_path_factory.mktemp("console") / "p", PLANS, pid=PID)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(PLANS)))
    receiver = Receiver(secret=WEBHOOK_SECRET)
    port = free_port()
    env = clean_env(DEVLOOP_WEBHOOK_URL=receiver.url, DEVLOOP_WEBHOOK_SECRET=WEBHOOK_SECRET)
    run = RunProcess(project, workers=3, env=env,
                     args=["--console", "--console-port", str(port),
                           "--max-usd", "50"])
    try:
        run.start()
        found: list[str] = []

        def printed() -> bool:
            found[:] = re.findall(r"Console: (http://\S+)/\?token=(\S+)", run.output())
            return bool(found)

        run.wait_for("the console's link", printed, 60)
        [(base, token)] = found[:1]
        run.wait_for("the console", lambda: _answers(port), 60)
        yield LiveConsole(run, base, token, receiver, project)
    finally:
        run.close()
        receiver.close()


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def signed_in(browser: Browser, live: LiveConsole) -> Iterator[BrowserContext]:
    """A browser context that opened the printed link once (it holds the cookie now)."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = context.new_page()
        page.goto(f"{live.base}/?token={live.token}")
        assert "token=" not in page.url  # the token left the address bar
        page.close()
        yield context
    finally:
        context.close()


def open_page(context: BrowserContext, url: str) -> Page:
    """A page of the console, its script run and its event stream connected."""
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector('body[data-live="1"]', timeout=30_000)
    return page


def wait_until(what: str, check: object, timeout_s: float) -> None:
    """Poll check() (a host-side condition) until true; AssertionError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.2)
