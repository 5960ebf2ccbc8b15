"""A console served in this process (uvicorn on a loop in a thread, a real Redis), and a
script's event-stream reader: for tests that look inside the console while pages follow it."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn

from devloop.console.app import Callbacks, ConsoleConfig, make_app
from devloop.console.hub import Hubs
from devloop.project.load import load_project
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build

TOKEN = "console-hub-tests-token-0123456789abcdef0123"


def layered(root: Path, store: RedisStore, n: int, pid: str, width: int = 50) -> list[str]:
    """Import a project of n units in layers of width, each past the first depending on 1-3
    units of the layer before (the shape of issue 27's measurements); its unit ids."""
    rng = random.Random(n)
    ids = [f"u{i:05d}" for i in range(n)]
    plans = []
    for i, unit in enumerate(ids):
        before = ids[(i // width - 1) * width: (i // width) * width] if i >= width else []
        plans.append(UnitPlan(unit, sorted(rng.sample(before, rng.randint(1, 3)))
                              if before else []))
    store.import_project(load_project(build(root, plans, pid=pid)))
    return ids


@dataclass
class Served:
    """The console's base URL, its event loop and its followers."""

    base: str
    port: int
    loop: asyncio.AbstractEventLoop
    hubs: Hubs

    def stall(self, seconds: float) -> None:
        """Keep the console's event loop busy (a loaded console) for a while."""
        self.loop.call_soon_threadsafe(time.sleep, seconds)

    def get(self, path: str) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("GET", path, headers={"X-DevLoop-Token": TOKEN})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()


@contextlib.contextmanager
def serve(store: RedisStore, redis_url: str, pid: str) -> Iterator[Served]:
    """make_app served on a free loopback port until the block ends."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = int(sock.getsockname()[1])
    guard = make_app(ConsoleConfig(store=store, redis_url=redis_url, token=TOKEN, port=port,
                                   callbacks=Callbacks(send=lambda _: None,
                                                       revoke=lambda _: None),
                                   pids=[pid]))
    server = uvicorn.Server(uvicorn.Config(guard, log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=1))
    loop = asyncio.new_event_loop()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.serve(sockets=[sock]))
        left = asyncio.all_tasks(loop)  # sse-starlette's shutdown watchers
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the console did not start"
            time.sleep(0.05)
        yield Served(f"http://127.0.0.1:{port}", port, loop, guard.app.state.hubs)
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


@dataclass
class Reader:
    """One page's event stream, read by a script (the token header) in a thread."""

    port: int
    path: str
    last_id: str | None = None
    events: list[tuple[str, Any, str | None]] = field(default_factory=list)
    opened: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    _conn: http.client.HTTPConnection | None = None

    def start(self) -> Reader:
        threading.Thread(target=self._read, daemon=True).start()
        assert self.opened.wait(30), f"{self.path}: the event stream did not open"
        return self

    def _read(self) -> None:
        try:
            self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            headers = {"X-DevLoop-Token": TOKEN}
            if self.last_id:
                headers["Last-Event-ID"] = self.last_id
            self._conn.request("GET", self.path, headers=headers)
            response = self._conn.getresponse()
            assert response.status == 200, response.status
            self.opened.set()
            name, data, ident = "message", [], None
            for raw in response:
                line = raw.decode().rstrip("\r\n")
                key, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if not line:
                    if data:
                        body = "\n".join(data)
                        self.events.append((name, json.loads(body), ident))
                    name, data, ident = "message", [], None
                elif key == "event":
                    name = value
                elif key == "data":
                    data.append(value)
                elif key == "id":
                    ident = self.last_id = value
        except (OSError, http.client.HTTPException):
            pass
        finally:
            self.ended.set()

    def named(self, name: str) -> list[Any]:
        return [data for event, data, _ in list(self.events) if event == name]

    def stats(self) -> list[str]:
        return [d["html"] for d in self.named("fragment") if d["target"] == "stats"]

    def close(self) -> None:
        if self._conn is not None and self._conn.sock is not None:
            with contextlib.suppress(OSError):
                self._conn.sock.shutdown(socket.SHUT_RDWR)


def wait_for(what: str, check: Any, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
        time.sleep(0.05)
