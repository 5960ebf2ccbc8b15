"""Calling a person: a JSON POST to DEVLOOP_WEBHOOK_URL when a unit is blocked or waits for
review (the payload is in docs/operations.md, "Calling a human"), signed with
DEVLOOP_WEBHOOK_SECRET (devloop.fleet.signing) and sent to that URL only: a redirect is an
answer that is not 2xx, never followed (a 302 would turn the POST into a GET to wherever it
points).

A `Notifier` thread follows the projects' live event streams (XREAD BLOCK); each event of a
unit turning blocked or review is claimed once in Redis (SET NX on its stream id, so two
notifiers, a run's and a console's, never both send it) and delivered from a thread of its
own, retried with a doubling backoff: the loop it runs beside never waits for it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from typing import Any

from devloop.core.errors import Problem
from devloop.fleet import signing
from devloop.fleet.control import read_control
from devloop.fleet.dispatch import CANCELLED
from devloop.fleet.human import HUMAN, HumanCall, human_call
from devloop.ledgers.sink import iso_z, utc_now
from devloop.store import RedisStore
from devloop.store.base import StoreError

log = logging.getLogger(__name__)
CLAIM_TTL_S = 7 * 24 * 3600
READ_BLOCK_MS = 2000
# Printed in the fix when the secret is missing: 32 random bytes, hex (a test runs it).
SECRET_COMMAND = "export DEVLOOP_WEBHOOK_SECRET=$(openssl rand -hex 32)"
Post = Callable[[str, bytes, dict[str, str], float], int]


def webhook_problem(url: str | None, secret: str | None) -> Problem | None:
    """What stops the webhook of these settings from starting (None: fine, or no webhook).

    A URL without a secret is refused rather than given a generated one: the receiver must
    hold the same secret to check anything, so a person has to set it on both sides anyway,
    and a secret made per run would change under the receiver at every start."""
    if url is None:
        return None
    if not url.startswith(("http://", "https://")):
        return Problem("DEVLOOP_WEBHOOK_URL", "environment", "not an http:// or https:// URL",
                       "set it to the receiver's URL")
    if not secret:
        return Problem("DEVLOOP_WEBHOOK_SECRET", "environment",
                       "not set, and DEVLOOP_WEBHOOK_URL is: every call is signed with it",
                       f"`{SECRET_COMMAND}`, and give the receiver the same value "
                       "(docs/operations.md, Calling a human: checking the signature)")
    if len(secret) < signing.MIN_SECRET_CHARS:
        return Problem("DEVLOOP_WEBHOOK_SECRET", "environment",
                       f"shorter than {signing.MIN_SECRET_CHARS} characters",
                       f"`{SECRET_COMMAND}`, and give the receiver the same value")
    return None


def payload(pid: str, call: HumanCall, event_id: str, console: str | None) -> dict[str, Any]:
    """The webhook's JSON body for one call."""
    return {
        "event": f"unit_{call.status}",
        "id": event_id,
        "project": pid,
        "unit": call.unit,
        "status": call.status,
        "attempt": call.attempt,
        "reason": call.reason,
        "last_failure": call.last_failure,
        "hint": call.hint,
        "console": console,
        "ts": iso_z(utc_now()),
    }


def console_link(store: RedisStore, pid: str, unit: str) -> str | None:
    """The unit's page in the console serving the project (no token), if one runs."""
    return unit_page(read_control(store, pid).console_url, pid, unit)


def unit_page(console_url: str | None, pid: str, unit: str) -> str | None:
    """The unit's page in the console at console_url (no token), if one runs."""
    return f"{console_url.rstrip('/')}/p/{pid}/u/{unit}" if console_url else None


class Notifier:
    """Follows the projects' events and POSTs each call for a person once, in the background."""

    def __init__(
        self,
        store: RedisStore,
        pids: list[str],
        url: str,
        secret: str,
        *,
        attempts: int = 5,
        base_s: float = 1.0,
        max_s: float = 60.0,
        timeout_s: float = 10.0,
        post: Post | None = None,
    ) -> None:
        if (problem := webhook_problem(url, secret)) is not None:
            raise ValueError(str(problem))
        self.store, self.pids, self.url, self.secret = store, pids, url, secret
        self.attempts, self.base_s, self.max_s, self.timeout_s = attempts, base_s, max_s, timeout_s
        self.post = post or _post
        # The last calls that went out, for the caller to show.
        self.delivered: deque[dict[str, Any]] = deque(maxlen=100)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="webhook", daemon=True)
        self._cursors: dict[str, str] = {}

    def start(self) -> Notifier:
        """Follow the projects from their newest event now (older calls are not resent)."""
        self._cursors = {pid: self.store.last_event_id(pid) for pid in self.pids}
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=READ_BLOCK_MS / 1000 + 5)

    def _follow(self) -> None:
        cursors = self._cursors
        while not self._stop.is_set():
            try:
                events = self.store.read_events(cursors, READ_BLOCK_MS, 200)
            except StoreError:
                self._stop.wait(1.0)  # Redis restarting: try again
                continue
            for pid, event_id, fields in events:
                cursors[pid] = event_id
                try:
                    self._consider(pid, event_id, fields)
                except (StoreError, KeyError, ValueError) as exc:
                    # One event it could not handle must not end the following.
                    log.warning("webhook: event %s skipped: %s", event_id, exc)

    def _consider(self, pid: str, event_id: str, fields: dict[bytes, bytes]) -> None:
        if fields.get(b"kind") != b"state" or fields.get(b"status", b"").decode() not in HUMAN:
            return
        if not self.store.claim_notice(pid, event_id, CLAIM_TTL_S):
            return  # another notifier has it
        unit = fields[b"unit"].decode()
        threading.Thread(target=self._deliver, args=(pid, unit, event_id, fields),
                         name=f"webhook-{unit}", daemon=True).start()

    def _deliver(self, pid: str, unit: str, event_id: str, fields: dict[bytes, bytes]) -> None:
        try:
            self._try_deliver(pid, unit, event_id, fields)
        except Exception as exc:  # the thread's end: say so, and let another notifier try
            log.warning("webhook: the call for %s/%s failed: %s", pid, unit, exc)
            with contextlib.suppress(StoreError):
                self.store.drop_notice_claim(pid, event_id)

    def _try_deliver(
        self, pid: str, unit: str, event_id: str, fields: dict[bytes, bytes]
    ) -> None:
        call = human_call(self.store, pid, unit)
        if call.status == "blocked" and self.store.get_state(pid, unit).extra.get(
            "block_kind"
        ) == CANCELLED:
            return  # a person stopped it: nobody needs calling
        status = fields[b"status"].decode()
        if call.status != status:  # it moved on since: say what the event said
            call = HumanCall(unit, status, int(fields.get(b"attempt", b"0")), call.reason,
                             call.last_failure, call.hint, call.since)
        body = payload(pid, call, event_id, console_link(self.store, pid, unit))
        data = json.dumps(body).encode()
        delay = self.base_s
        for attempt in range(1, self.attempts + 1):
            # Signed at each try: a retry carries a fresh timestamp, the same body and id.
            headers = {signing.HEADER: signing.sign(self.secret, data)}
            status_code = self.post(self.url, data, headers, self.timeout_s)
            if 200 <= status_code < 300:
                self.delivered.append(body)
                return
            if 300 <= status_code < 400:
                log.warning("webhook: %s answered %d: redirects are not followed; set "
                            "DEVLOOP_WEBHOOK_URL to the URL that answers 2xx", self.url,
                            status_code)
            if attempt < self.attempts and self._stop.wait(delay):
                return
            delay = min(delay * 2, self.max_s)
        log.warning("webhook: the call for %s/%s (%s) was not accepted after %d tries", pid,
                    unit, status, self.attempts)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx stays the answer: the call goes to the configured URL or nowhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _post(url: str, data: bytes, headers: dict[str, str], timeout_s: float) -> int:
    """POST data as JSON; the HTTP status (a redirect's own, not followed), or 0 when the
    receiver could not be reached."""
    request = urllib.request.Request(
        url, data=data, method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "devloop-webhook",
                 **headers},
    )
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ValueError):
        return 0
