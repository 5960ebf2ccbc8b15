"""The webhook's signature: HMAC-SHA256 of `"<timestamp>.<body>"` with DEVLOOP_WEBHOOK_SECRET,
sent as `X-DevLoop-Signature: t=<unix seconds>,v1=<hex digest>` (Stripe's shape).

The timestamp is inside what is signed, so a captured call cannot be replayed later than the
receiver's tolerance, nor its body changed. `verify` is what a receiver calls
(docs/operations.md, "Calling a human", has the same check in a dozen stdlib lines for
receivers without DevLoop).
"""

from __future__ import annotations

import hashlib
import hmac
import time

from devloop.core.errors import DevLoopError

HEADER = "X-DevLoop-Signature"
TOLERANCE_S = 300  # how far a call's timestamp may be from the receiver's clock
MIN_SECRET_CHARS = 32


class BadSignature(DevLoopError, ValueError):
    """A call whose signature does not hold: forged, altered, replayed late, or unsigned."""


def digest(secret: str, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of `"<timestamp>.<body>"` under secret."""
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int | None = None) -> str:
    """The X-DevLoop-Signature value for body, signed now (or at timestamp)."""
    when = int(time.time()) if timestamp is None else timestamp
    return f"t={when},v1={digest(secret, when, body)}"


def verify(secret: str, body: bytes, header: str | None, *,
           tolerance_s: int = TOLERANCE_S, now: float | None = None) -> int:
    """Check a received call: the header's v1 digest over its timestamp and the raw body
    (compared in constant time) and a timestamp within tolerance_s of now. Returns the
    timestamp; raises BadSignature saying what failed."""
    if not header:
        raise BadSignature(f"no {HEADER} header")
    fields: dict[str, list[str]] = {}
    for part in header.split(","):
        key, eq, value = part.strip().partition("=")
        if eq:
            fields.setdefault(key, []).append(value)
    stamps, signatures = fields.get("t", []), fields.get("v1", [])
    if len(stamps) != 1 or not (stamps[0].isascii() and stamps[0].isdigit()) or not signatures:
        raise BadSignature(f"{HEADER} is not t=<unix seconds>,v1=<hex>")
    timestamp = int(stamps[0])
    expected = digest(secret, timestamp, body)
    # Every v1 is compared (a sender rotating its secret may send two).
    if not any(hmac.compare_digest(expected.encode(), candidate.encode("utf-8", "replace"))
               for candidate in signatures):
        raise BadSignature("the signature does not match the body under this secret")
    skew = abs((time.time() if now is None else now) - timestamp)
    if skew > tolerance_s:
        raise BadSignature(f"signed {skew:.0f} s away from now (tolerance {tolerance_s} s): "
                           "a replay, or a clock to fix")
    return timestamp
