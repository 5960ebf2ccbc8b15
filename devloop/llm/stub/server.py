"""A Messages-API HTTP server that serves scripted turns, faults and prompt-cache usage.

The unmodified `anthropic` client talks to it through `base_url`: tests start it
in-process (`with StubServer(script) as stub: ...`), the CLI runs `serve_forever`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from devloop.llm.stub.app import RecordedRequest, StubApp
from devloop.llm.stub.cache import PromptCache
from devloop.llm.stub.relay.desk import RelayDesk
from devloop.llm.stub.script import Script

log = logging.getLogger(__name__)


class StubServer:
    """The stub, in-process: `start()` binds (port 0 = a free port), `stop()` shuts it down."""

    def __init__(
        self,
        script: Script | dict[str, Any] | str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        record_bodies: bool = False,
        desk: RelayDesk | None = None,
    ) -> None:
        if isinstance(script, dict):
            script = Script.from_dict(script)
        elif not isinstance(script, Script):
            script = Script.load(script)
        self.app = StubApp(script, api_key, record_bodies, desk)
        self.host, self.port = host, port
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stop_lock = threading.Lock()

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (headers and body only when
        started with record_bodies=True)."""
        return self.app.requests

    @property
    def cache(self) -> PromptCache:
        """The prompt cache (e.g. `clear()` it between phases of a test)."""
        return self.app.cache

    @property
    def base_url(self) -> str:
        """Where the anthropic client should point (`base_url=`)."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> StubServer:
        """Bind and serve on a background thread."""
        self._httpd = _HTTPServer((self.host, self.port), _Handler, self.app)
        self.port = self._httpd.server_address[1]
        # A short poll interval makes stop() quick (shutdown waits for the next poll).
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="stub-llm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (safe to call twice, from any thread)."""
        with self._stop_lock:
            httpd, self._httpd = self._httpd, None
            thread, self._thread = self._thread, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def wait(self) -> None:
        """Block until another thread calls stop()."""
        thread = self._thread
        if thread is not None:
            thread.join()

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[_Handler], app: StubApp) -> None:
        self.app = app
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-stream is normal here; keep tracebacks off stderr.
        log.debug("stub connection from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    # The headers and the body go out as two writes: with Nagle's algorithm the body waits
    # for the client's delayed ACK of the headers, 40 ms a request on a kept-alive connection.
    disable_nagle_algorithm = True
    timeout = 60  # an idle keep-alive connection is closed after this long
    server: _HTTPServer

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        reply = self.server.app.handle(self.path, dict(self.headers.items()), raw)
        if reply.delay_s:
            time.sleep(reply.delay_s)
        if reply.drop:
            self.close_connection = True
            with contextlib.suppress(OSError):  # end the connection with no response at all
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.events is None:
            self.send_header("content-length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        # An event stream without a length ends when the connection closes.
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()
        for chunk in reply.events:
            self.wfile.write(chunk)
            self.wfile.flush()

    def do_GET(self) -> None:
        self.do_POST()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("stub %s - " + format, self.address_string(), *args)


def serve_forever(
    script_path: str | Path | None,
    host: str = "127.0.0.1",
    port: int = 8766,
    on_ready: Callable[[StubServer], None] | None = None,
    desk: RelayDesk | None = None,
) -> None:
    """Serve the script, or relay to files through `desk`, until interrupted or stopped
    (the `devloop stub-llm` command).

    on_ready gets the running server, e.g. to print its base_url or to stop it later.
    """
    script = Script() if script_path is None else Script.load(script_path)
    stub = StubServer(script, host=host, port=port, desk=desk).start()
    log.info("stub LLM serving %s at %s", script_path or "a relay", stub.base_url)
    if on_ready is not None:
        on_ready(stub)
    try:
        stub.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stub.stop()
