"""A local HTTP server that receives webhook POSTs (JSON) for tests; it can fail the first
few with a status of its choosing, answer every request with a redirect, and check each
call's signature with the library's verifier."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devloop.fleet import signing


@dataclass(frozen=True)
class Received:
    """One request as it arrived."""

    method: str
    path: str
    headers: dict[str, str]  # names lower-cased (HTTP header names ignore case)
    body: bytes


class Receiver:
    """Listens on 127.0.0.1 (a free port) until closed; `calls` are the JSON bodies taken,
    `requests` everything that arrived (any method)."""

    def __init__(self, fail_first: int = 0, fail_status: int = 500, *,
                 secret: str | None = None, redirect_to: str | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.requests: list[Received] = []
        self.bad_signatures: list[str] = []  # why each call that failed the check failed
        self.attempts = 0
        self.fail_first, self.fail_status = fail_first, fail_status
        self.secret, self.redirect_to = secret, redirect_to
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _take(self) -> bytes:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k.lower(): v for k, v in self.headers.items()}
                owner.requests.append(Received(self.command, self.path, headers, body))
                return body

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                self._take()
                self.send_response(200)  # an "internal" page that answers anyone
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = self._take()
                owner.attempts += 1
                if owner.redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", owner.redirect_to)
                elif owner.attempts <= owner.fail_first:
                    self.send_response(owner.fail_status)
                else:
                    if owner.secret is not None:
                        try:
                            signing.verify(owner.secret, body,
                                           self.headers.get(signing.HEADER))
                        except signing.BadSignature as exc:
                            owner.bad_signatures.append(str(exc))
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
