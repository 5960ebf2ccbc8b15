"""A project's controls: its budget, the money spent, pauses and cancels.

devloop:{pid}:control   hash    max_usd, paused ("budget" | "cancelled"), paused_at,
                                epoch (bumped by each cancel), cancel:{unit}, console_url
devloop:{pid}:spent     string  dollars spent on model calls (INCRBYFLOAT by every worker)

Every model call adds its cost to `spent` (INCRBYFLOAT, so concurrent workers never lose
an update); the call that reaches `max_usd` pauses the project. A paused project starts no
new session and its running sessions stop before their next turn (`StopFlag`), keeping
their checkpoints; `resume` clears the pause and they carry on.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from devloop.ids import check_id
from devloop.llm.base import LLMProvider, LLMRequest, LLMResponse
from devloop.store import RedisStore
from devloop.store.keys import EVENTS_MAXLEN

PAUSES = ("budget", "cancelled")

# KEYS: control, events.  ARGV: the total spent (just added), now, events maxlen.  When the
# total reaches the cap, pauses the project (once: the first call past the cap). The
# INCRBYFLOAT itself runs outside the script: inside one, Redis 6.2 rewrites its arguments
# for the AOF under Lua's feet, and the server crashed with a corrupt heap.
CAP_CHECK = """
local cap = redis.call('HGET', KEYS[1], 'max_usd')
if cap and tonumber(ARGV[1]) >= tonumber(cap)
    and redis.call('HSETNX', KEYS[1], 'paused', 'budget') == 1 then
  redis.call('HSET', KEYS[1], 'paused_at', ARGV[2])
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'kind', 'paused', 'reason', 'budget')
end
return 1
"""

# KEYS: control, spent, events.  ARGV: unit ('' for the project), now, events maxlen.
# Why a step or session must stop now, or false; a cap already spent pauses the project.
STOP_REASON = """
local paused = redis.call('HGET', KEYS[1], 'paused')
if paused then return paused end
if ARGV[1] ~= '' and redis.call('HEXISTS', KEYS[1], 'cancel:' .. ARGV[1]) == 1 then
  return 'cancelled'
end
local cap = redis.call('HGET', KEYS[1], 'max_usd')
if cap and tonumber(redis.call('GET', KEYS[2]) or '0') >= tonumber(cap) then
  redis.call('HSET', KEYS[1], 'paused', 'budget', 'paused_at', ARGV[2])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'kind', 'paused', 'reason', 'budget')
  return 'budget'
end
return false
"""


@dataclass(frozen=True)
class Control:
    """A project's controls as stored: the cap, what was spent, and why it is paused."""

    max_usd: float | None = None
    spent_usd: float = 0.0
    paused: str | None = None
    paused_at: float | None = None
    epoch: int = 0
    console_url: str | None = None
    cancelled_units: tuple[str, ...] = ()


def control_key(store: RedisStore, pid: str) -> str:
    return f"{store.keys(pid).prefix}control"


def spent_key(store: RedisStore, pid: str) -> str:
    return f"{store.keys(pid).prefix}spent"


def read_control(store: RedisStore, pid: str) -> Control:
    """The project's controls, in one round trip."""
    with store.client.pipeline(transaction=False) as pipe:
        pipe.hgetall(control_key(store, pid))
        pipe.get(spent_key(store, pid))
        raw, spent = pipe.execute()
    fields = {k.decode(): v.decode("utf-8", errors="replace") for k, v in raw.items()}
    return Control(
        max_usd=float(fields["max_usd"]) if "max_usd" in fields else None,
        spent_usd=float(spent or 0.0),
        paused=fields.get("paused"),
        paused_at=float(fields["paused_at"]) if "paused_at" in fields else None,
        epoch=int(fields.get("epoch", 0)),
        console_url=fields.get("console_url"),
        cancelled_units=tuple(sorted(k[7:] for k in fields if k.startswith("cancel:"))),
    )


def current_epoch(store: RedisStore, pid: str) -> int:
    """How many cancels the project has seen: chains sent now carry it in their task ids."""
    return int(store.client.hget(control_key(store, pid), "epoch") or 0)


def set_max_usd(store: RedisStore, pid: str, max_usd: float | None) -> None:
    """Set the project's cap in dollars (None removes it)."""
    if max_usd is None:
        store.client.hdel(control_key(store, pid), "max_usd")
    else:
        store.client.hset(control_key(store, pid), "max_usd", repr(float(max_usd)))


def spend(store: RedisStore, pid: str, usd: float) -> float:
    """Add one model call's cost to the project; the total (the call reaching the cap
    pauses the project)."""
    total = float(store.client.incrbyfloat(spent_key(store, pid), float(usd)))
    keys = [control_key(store, pid), store.keys(pid).events]
    store.client.eval(CAP_CHECK, 2, *keys, repr(total), time.time(), EVENTS_MAXLEN)
    return total


def stop_reason(store: RedisStore, pid: str, unit: str = "") -> str | None:
    """"budget" or "cancelled" when the project (or this unit) must not go on, else None."""
    keys = [control_key(store, pid), spent_key(store, pid), store.keys(pid).events]
    reason = store.client.eval(STOP_REASON, 3, *keys, unit, time.time(), EVENTS_MAXLEN)
    return reason.decode() if isinstance(reason, bytes) else reason or None


def pause(store: RedisStore, pid: str, reason: str) -> bool:
    """Pause the project (reason "budget" or "cancelled"); False when it already was."""
    key = control_key(store, pid)
    if not store.client.hsetnx(key, "paused", reason):
        return False
    with store.client.pipeline(transaction=False) as pipe:
        pipe.hset(key, "paused_at", time.time())
        pipe.xadd(store.keys(pid).events, {"kind": "paused", "reason": reason},
                  maxlen=EVENTS_MAXLEN, approximate=True)
        pipe.execute()
    return True


def bump_epoch(store: RedisStore, pid: str) -> int:
    """Start a new epoch (a cancel): chains sent from now on get task ids never revoked."""
    return int(store.client.hincrby(control_key(store, pid), "epoch", 1))


def mark_unit_cancelled(store: RedisStore, pid: str, unit: str, on: bool) -> None:
    """Set (or clear) a unit's cancel: its running session stops before its next turn."""
    field = f"cancel:{check_id(unit, 'unit id')}"
    if on:
        store.client.hset(control_key(store, pid), field, "1")
    else:
        store.client.hdel(control_key(store, pid), field)


def clear_pause(
    store: RedisStore, pid: str, max_usd: float | None = None, units: bool = True
) -> Control:
    """Lift a pause and (with `units`) every unit's cancel, optionally with a new cap; the
    controls now."""
    key = control_key(store, pid)
    before = read_control(store, pid)
    cancels = [f"cancel:{u}" for u in before.cancelled_units] if units else []
    with store.client.pipeline(transaction=False) as pipe:
        pipe.hdel(key, "paused", "paused_at", *cancels)
        if max_usd is not None:
            pipe.hset(key, "max_usd", repr(float(max_usd)))
        if before.paused:
            pipe.xadd(store.keys(pid).events, {"kind": "resumed"}, maxlen=EVENTS_MAXLEN,
                      approximate=True)
        pipe.execute()
    return read_control(store, pid)


def set_console_url(store: RedisStore, pid: str, url: str | None) -> None:
    """Where the project's console is (without its token): the webhook links to it."""
    if url:
        store.client.hset(control_key(store, pid), "console_url", url)
    else:
        store.client.hdel(control_key(store, pid), "console_url")


class StopFlag(threading.Event):
    """The cancel flag a session checks before each turn: set here, or by the project's
    controls in Redis (a pause, a spent budget, this unit's cancel)."""

    def __init__(self, store: RedisStore, pid: str, unit: str) -> None:
        super().__init__()
        self.store, self.pid, self.unit = store, pid, unit
        self.reason: str | None = None

    def is_set(self) -> bool:
        if super().is_set():
            return True
        self.reason = stop_reason(self.store, self.pid, self.unit)
        if self.reason is not None:
            self.set()
        return self.reason is not None


class MeteredProvider:
    """A model provider whose every call adds its cost to the project's spend (reassess
    sessions included), so the cap holds across every worker."""

    def __init__(self, inner: LLMProvider, store: RedisStore, pid: str) -> None:
        self.inner, self.store, self.pid = inner, store, pid

    def complete(self, request: LLMRequest) -> LLMResponse:
        response = self.inner.complete(request)
        if response.cost_usd:
            spend(self.store, self.pid, response.cost_usd)
        return response


def steps_running(store: RedisStore, pid: str) -> bool:
    """Whether any step of the project holds its lease (a session or a test run going on)."""
    return next(store.client.scan_iter(match=store.keys(pid).lease_pattern, count=500),
                None) is not None
