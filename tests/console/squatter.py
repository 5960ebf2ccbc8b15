"""Another program holding a port: an HTTP server in a process of its own that answers every
request and writes down each request line it got, for tests of a busy console port."""

from __future__ import annotations

import http.cookiejar
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.proctree import kill_tree

SERVER = """
import http.server, sys
log = open(sys.argv[1], "a")
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        log.write(self.requestline + "\\n"); log.flush()
        self.send_response(200); self.end_headers(); self.wfile.write(b"squatter")
    do_POST = do_GET
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Squatter:
    """Listens on a free port of 127.0.0.1 until closed; `requests()` are the lines it got."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.log.touch()
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, str(log)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def requests(self) -> list[str]:
        return self.log.read_text().splitlines()

    def close(self) -> None:
        kill_tree(self.proc.pid)
        self.proc.wait(timeout=10)

    def __enter__(self) -> Squatter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def opener() -> urllib.request.OpenerDirector:
    """A client that keeps cookies, as a browser would (the link's token becomes one, with a
    key in the URL it is sent on to)."""
    return urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def get(client: urllib.request.OpenerDirector, url: str, timeout_s: float = 30) -> str:
    """The body of a GET that answered 200 (after redirects)."""
    with client.open(url, timeout=timeout_s) as response:
        assert response.status == 200, (url, response.status)
        return str(response.read().decode())
