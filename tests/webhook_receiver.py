"""A local HTTP server that receives webhook POSTs (JSON) for tests; it can fail the first
few with a status of its choosing."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """Listens on 127.0.0.1 (a free port) until closed; `calls` are the JSON bodies taken."""

    def __init__(self, fail_first: int = 0, fail_status: int = 500) -> None:
        self.calls: list[dict[str, Any]] = []
        self.attempts = 0
        self.fail_first, self.fail_status = fail_first, fail_status
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.attempts += 1
                if owner.attempts <= owner.fail_first:
                    self.send_response(owner.fail_status)
                else:
                    owner.calls.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(self, count: int, timeout_s: float) -> list[dict[str, Any]]:
        """The calls once there are `count` of them (AssertionError after timeout_s)."""
        deadline = time.monotonic() + timeout_s
        while len(self.calls) < count:
            assert time.monotonic() < deadline, f"{len(self.calls)} webhook call(s), not {count}"
            time.sleep(0.05)
        return self.calls

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
