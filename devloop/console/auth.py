"""Who may use the console: the holder of its token, from a page of its own origin.

    GET /any?token=T     T right: a 303 to the same URL without it, setting an HttpOnly,
                         SameSite=Strict cookie; T wrong: 403
    any request          needs the cookie (or an X-DevLoop-Token header, for scripts),
                         and a Host the console answers to (no DNS rebinding)
    POST (any change)    also needs an Origin (or Referer) equal to the console's own

Every response carries a CSP whose script-src is a fresh nonce (the pages' one inline
script), no framing, no sniffing, and no caching.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable
from urllib.parse import urlencode, urlsplit

from starlette.datastructures import URL, MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = ("GET", "HEAD")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def new_token() -> str:
    """A random token for the link printed at start."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    """One cookie per console port: cookies ignore ports, consoles must not share one."""
    return f"devloop_console_{port}"


def csp(nonce: str) -> str:
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; "
        "style-src 'unsafe-inline'; "
        "img-src data:; "
        "connect-src 'self'; "
        "form-action 'self'; "
        "base-uri 'none'; "
        "frame-ancestors 'none'"
    )


class Guard:
    """ASGI middleware: token, host and same-origin checks, and the security headers."""

    def __init__(self, app: ASGIApp, token: str, port: int,
                 hosts: Iterable[str] | None = LOOPBACK) -> None:
        self.app, self.token, self.port = app, token, port
        self.hosts = None if hosts is None else {h.lower() for h in hosts}
        self.cookie = cookie_name(port)

    def _valid(self, candidate: str | None) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self.token.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(16)
        scope.setdefault("state", {})["nonce"] = nonce
        response = self._refusal(Request(scope))

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = csp(nonce)
                headers["X-Content-Type-Options"] = "nosniff"
                headers["X-Frame-Options"] = "DENY"
                headers["Referrer-Policy"] = "same-origin"
                headers.setdefault("Cache-Control", "no-store")
            await send(message)

        if response is not None:
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request: Request) -> Response | None:
        """The response that refuses (or redirects) this request, or None to let it in."""
        host = request.headers.get("host", "")
        if self.hosts is not None and _hostname(host) not in self.hosts:
            return PlainTextResponse(f"unknown host {host!r}", status_code=400)
        offered = request.query_params.get("token")
        if offered is not None:
            if not self._valid(offered):
                return _refused("wrong token: open the link the console printed at start")
            return self._login(request)
        if not (self._valid(request.cookies.get(self.cookie))
                or self._valid(request.headers.get("x-devloop-token"))):
            return _refused("no token: open the link the console printed at start")
        if request.method not in SAFE_METHODS and not _same_origin(request, host):
            return _refused("cross-origin request refused")
        return None

    def _login(self, request: Request) -> Response:
        """The token was right: drop it from the URL, remember it in the cookie."""
        kept = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        url = URL(request.url.path + (f"?{urlencode(kept)}" if kept else ""))
        response = RedirectResponse(str(url), status_code=303)
        response.set_cookie(self.cookie, self.token, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        return response


def _same_origin(request: Request, host: str) -> bool:
    """Whether a state-changing request comes from a page of this console."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        referer = request.headers.get("referer")
        if not referer:
            return False
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return origin in (f"http://{host}", f"https://{host}")


def _hostname(host: str) -> str:
    """`host[:port]` -> host, lower-cased (IPv6 in brackets kept)."""
    if host.startswith("["):
        return host[: host.find("]") + 1].lower()
    return host.rsplit(":", 1)[0].lower() if ":" in host else host.lower()


def _refused(why: str) -> Response:
    return PlainTextResponse(f"403 forbidden: {why}", status_code=403)
