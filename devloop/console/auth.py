"""Who may use the console: a browser that opened the link it printed, or a script holding its
token, from a page of its own origin.

Browsers scope cookies by host, not port: every server on 127.0.0.1 receives the console's
cookie, and whoever runs one can replay it with any Host header. So the cookie alone opens
nothing. A browser's credential has two halves:

    cookie   devloop_console_<port>=C   a random session id (HttpOnly, SameSite=Strict)
    key      ?key=K in every URL         K = HMAC(this console's own secret, C)

and a request needs both. The key never leaves the console's origin: it is in the links,
forms and event-stream URLs of its pages, in the browser's localStorage (kept per scheme,
host and port) and in Referers sent to the console only (`Referrer-Policy: same-origin`).
Another port receives C and nothing else; a URL copied out of the address bar carries K and
not C. The secret is made when the console starts, so a console started again (on a port it
did not hold, or with the same DEVLOOP_CONSOLE_TOKEN) honours no earlier browser's pair.

    GET /any?token=T     T right: a 303 to the same URL with key=K instead, setting C;
                         T wrong: 403
    GET without key      a page whose script adds the key this origin's localStorage holds
                         (a link from a webhook, a bookmark) and otherwise says to open the
                         printed link (403)
    any request          needs C and its key, or the X-DevLoop-Token header (scripts), and a
                         Host the console answers to (no DNS rebinding)
    POST (any change)    also needs an Origin (or Referer) equal to the console's own

Every response carries a CSP whose script-src is a fresh nonce (the pages' one inline
script), no framing, no sniffing, and no caching.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from urllib.parse import urlencode, urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

SAFE_METHODS = ("GET", "HEAD")
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
KEY_PARAM = "key"
STORED_KEY = "devloop-console-key"  # the localStorage item the pages keep their key in
_SESSION_ID = re.compile(r"[A-Za-z0-9_-]{43}")
NO_TOKEN = "no token: open the link the console printed at start"


def new_token() -> str:
    """A random token for the link printed at start."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    """One cookie per console port, so two consoles of one host do not overwrite each other's
    (every port receives both: neither opens anything alone)."""
    return f"devloop_console_{port}"


def with_key(path: str, key: str | None) -> str:
    """path (query and #fragment kept) with the page key added: every link a page renders."""
    if not key:
        return path
    base, hash_, fragment = path.partition("#")
    joined = f"{base}{'&' if '?' in base else '?'}{urlencode({KEY_PARAM: key})}"
    return f"{joined}{hash_}{fragment}"


def page_key(scope: Scope) -> str | None:
    """The key of the browser this request came from (None: a script's header, or refused)."""
    key = scope.get("state", {}).get("key")
    return str(key) if key else None


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
    """ASGI middleware: the credential, host and same-origin checks, and the security headers."""

    def __init__(self, app: ASGIApp, token: str, port: int,
                 hosts: Iterable[str] | None = LOOPBACK) -> None:
        self.app, self.token, self.port = app, token, port
        self.hosts = None if hosts is None else {h.lower() for h in hosts}
        self.cookie = cookie_name(port)
        # This console's own: keys made by any other console (or an earlier start) fail.
        self._secret = secrets.token_bytes(32)

    def key_for(self, session: str) -> str:
        """The URL key that goes with the session id in the cookie."""
        mac = hmac.new(self._secret, session.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def _is_token(self, candidate: str | None) -> bool:
        if not candidate:
            return False
        return hmac.compare_digest(candidate.encode("utf-8", "replace"), self.token.encode())

    def _browser_key(self, request: Request) -> str | None:
        """The request's key when it goes with the request's cookie, else None."""
        session, key = request.cookies.get(self.cookie), request.query_params.get(KEY_PARAM)
        if not session or not key or not _SESSION_ID.fullmatch(session):
            return None
        expected = self.key_for(session)
        return key if hmac.compare_digest(key.encode("utf-8", "replace"),
                                          expected.encode()) else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(16)
        scope.setdefault("state", {})["nonce"] = nonce
        response = self._refusal(Request(scope), nonce)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = csp(nonce)
                headers["X-Content-Type-Options"] = "nosniff"
                headers["X-Frame-Options"] = "DENY"
                # Not no-referrer: that would make the browser send `Origin: null` on the
                # pages' own form POSTs. same-origin sends a Referer (with the key) to the
                # console alone.
                headers["Referrer-Policy"] = "same-origin"
                headers.setdefault("Cache-Control", "no-store")
            await send(message)

        if response is not None:
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, request: Request, nonce: str) -> Response | None:
        """The response that refuses (or redirects) this request, or None to let it in."""
        host = request.headers.get("host", "")
        if self.hosts is not None and _hostname(host) not in self.hosts:
            return PlainTextResponse(f"unknown host {host!r}", status_code=400)
        if request.method not in SAFE_METHODS and not _same_origin(request, host):
            return _refused("cross-origin request refused")
        offered = request.query_params.get("token")
        if offered is not None:
            if not self._is_token(offered):
                return _refused("wrong token: open the link the console printed at start")
            return self._login(request)
        if self._is_token(request.headers.get("x-devloop-token")):
            return None
        key = self._browser_key(request)
        if key is not None:
            request.scope["state"]["key"] = key
            return None
        if KEY_PARAM in request.query_params:
            return _refused("this page's key is not this console's (it started again, or the "
                            "browser's cookie is another's): open the link the console printed "
                            "at start")
        if request.method in SAFE_METHODS:
            return _opener(nonce)
        return _refused(NO_TOKEN)

    def _login(self, request: Request) -> Response:
        """The token was right: a 303 to the URL without it and with the key of a session
        (the browser's session id when it has one, so its other tabs keep working)."""
        session = request.cookies.get(self.cookie) or ""
        if not _SESSION_ID.fullmatch(session):
            session = secrets.token_urlsafe(32)
        kept = [(k, v) for k, v in request.query_params.multi_items()
                if k not in ("token", KEY_PARAM)]
        path = request.url.path + (f"?{urlencode(kept)}" if kept else "")
        response = RedirectResponse(with_key(path, self.key_for(session)), status_code=303)
        response.set_cookie(self.cookie, session, httponly=True, samesite="strict",
                            secure=request.url.scheme == "https", path="/")
        return response


def _opener(nonce: str) -> Response:
    """403 for a GET without a key: its script retries with the key this origin's storage
    holds (a webhook's link, a bookmark), else the page says to open the printed link."""
    return HTMLResponse(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>DevLoop console</title></head><body><p>403 forbidden: {NO_TOKEN}</p>"
        f"<script nonce=\"{nonce}\">(function () {{\n"
        "  var key = null;\n"
        f"  try {{ key = window.localStorage.getItem(\"{STORED_KEY}\"); }} catch (e) {{}}\n"
        "  if (!key) { return; }\n"
        "  var url = new URL(window.location.href);\n"
        f"  url.searchParams.set(\"{KEY_PARAM}\", key);\n"
        "  window.location.replace(url.toString());\n"
        "})();</script></body></html>",
        status_code=403,
    )


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
