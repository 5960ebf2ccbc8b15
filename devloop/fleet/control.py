"""A project's controls: its budget, the money spent, pauses and cancels.

devloop:{pid}:control   hash    max_usd (a person's cap), default_max_usd (DevLoop's, when no
                                one gave a cap), paused ("budget" | "cancelled"), paused_at,
                                epoch (bumped by each cancel), cancel:{unit}, console_url
devloop:{pid}:spend     hash    total, unit:{id}, scripted: nanodollars spent on model calls
                                (HINCRBY); `scripted` is the part `--llm stub`'s turns cost
devloop:{pid}:spent     string  dollars an earlier DevLoop counted (INCRBYFLOAT); still counted

The spend hash is the ledger of record: the cap is enforced against its total, and every
figure shown (status, the live table, the end of a run, the console, the report through
agent-state/spend.json) reads it. Every model call adds its cost, in whole nanodollars, to
the total and to its unit's share in one transaction (integers, so concurrent workers never
lose an update and the units always add up to the total); the call that reaches the cap
pauses the project. A person's cap counts every call priced (a stub run's scripted turns
too, so a cap can be tried without spending); DevLoop's default counts only the calls a real
model may have charged for, so scripted runs and the benchmarks never reach it. A paused
project starts no new session and its running sessions stop before their next turn
(`StopFlag`), keeping their checkpoints; `resume` clears the pause and they carry on. Calls
already under way when the cap is reached finish and count, so the total can pass the cap
by what they cost.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from redis.client import Pipeline

from devloop.fleet.marks import scripted_now
from devloop.fleet.money import from_nano, to_nano
from devloop.ids import check_id
from devloop.llm.base import LLMProvider, LLMRequest, LLMResponse
from devloop.safedir import Dir
from devloop.store import RedisStore
from devloop.store.keys import EVENTS_MAXLEN

PAUSES = ("budget", "cancelled")
SPEND_FILE = "agent-state/spend.json"  # the ledger as exported to the folder (the report's)

# Whether `spent` (everything) or `real` (all but scripted turns) reached the project's cap:
# a person's counts everything, DevLoop's default only the real part (it stands only when no
# person gave a cap).
REACHED = """
local function reached(control, spent, real)
  local cap = redis.call('HGET', control, 'max_usd')
  if cap then return spent >= tonumber(cap) end
  local default = redis.call('HGET', control, 'default_max_usd')
  return default ~= false and real >= tonumber(default)
end
"""

# KEYS: control, events.  ARGV: the total spent (just added), now, events maxlen, the real
# part of the total.  When a cap is reached, pauses the project (once: the first call past
# it). The HINCRBYs themselves run outside the script: inside one, Redis 6.2 rewrote an
# INCRBYFLOAT's arguments for the AOF under Lua's feet, and the server crashed.
CAP_CHECK = REACHED + """
if reached(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[4]))
    and redis.call('HSETNX', KEYS[1], 'paused', 'budget') == 1 then
  redis.call('HSET', KEYS[1], 'paused_at', ARGV[2])
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'kind', 'paused', 'reason', 'budget')
end
return 1
"""

# KEYS: control, spend, events, the earlier float total.  ARGV: unit ('' for the project),
# now, events maxlen.  Why a step or session must stop now, or false; a cap already spent
# pauses the project.
STOP_REASON = REACHED + """
local paused = redis.call('HGET', KEYS[1], 'paused')
if paused then return paused end
if ARGV[1] ~= '' and redis.call('HEXISTS', KEYS[1], 'cancel:' .. ARGV[1]) == 1 then
  return 'cancelled'
end
local ledger = redis.call('HMGET', KEYS[2], 'total', 'scripted')
local spent = tonumber(ledger[1] or '0') / 1e9 + tonumber(redis.call('GET', KEYS[4]) or '0')
if reached(KEYS[1], spent, spent - tonumber(ledger[2] or '0') / 1e9) then
  redis.call('HSET', KEYS[1], 'paused', 'budget', 'paused_at', ARGV[2])
  redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[3], '*', 'kind', 'paused', 'reason', 'budget')
  return 'budget'
end
return false
"""


@dataclass(frozen=True)
class Control:
    """A project's controls as stored: the cap, what was spent, and why it is paused."""

    max_usd: float | None = None  # a person's cap (--max-usd, DEVLOOP_PROJECT_MAX_USD)
    spent_usd: float = 0.0  # the ledger's total: every model call of the project
    default_max_usd: float | None = None  # DevLoop's cap, standing when no person gave one
    scripted_usd: float = 0.0  # the part of the total `--llm stub`'s scripted turns cost
    unit_spent: dict[str, float] = field(default_factory=dict)  # each unit's share of it
    paused: str | None = None
    paused_at: float | None = None
    epoch: int = 0
    console_url: str | None = None
    cancelled_units: tuple[str, ...] = ()

    @property
    def real_spent_usd(self) -> float:
        """What the calls a real model may have charged for cost (the default cap's count)."""
        return from_nano(to_nano(self.spent_usd) - to_nano(self.scripted_usd))

    @property
    def default_cap_reached(self) -> bool:
        """Paused by DevLoop's default cap (no person gave one)."""
        return (self.paused == "budget" and self.max_usd is None
                and self.default_max_usd is not None
                and self.real_spent_usd >= self.default_max_usd)


def control_key(store: RedisStore, pid: str) -> str:
    return f"{store.keys(pid).prefix}control"


def spend_key(store: RedisStore, pid: str) -> str:
    return f"{store.keys(pid).prefix}spend"


def spent_key(store: RedisStore, pid: str) -> str:
    """The total an earlier DevLoop kept in float dollars: still part of the project's."""
    return f"{store.keys(pid).prefix}spent"


def _total(nano: bytes | int | None, earlier: bytes | None) -> float:
    """The ledger's total in dollars, with what an earlier DevLoop counted."""
    return from_nano(int(nano or 0) + to_nano(float(earlier or 0.0)))


def read_control(store: RedisStore, pid: str, units: Sequence[str] | None = None) -> Control:
    """The project's controls, in one round trip; with units, only their shares of the spend
    (the ledger holds one per unit that spent: the console reads one unit's by key)."""
    with store.client.pipeline(transaction=False) as pipe:
        pipe.hgetall(control_key(store, pid))
        if units is None:
            pipe.hgetall(spend_key(store, pid))
        else:
            pipe.hmget(spend_key(store, pid), ["total", "scripted", *(f"unit:{u}" for u in units)])
        pipe.get(spent_key(store, pid))
        raw, ledger, earlier = pipe.execute()
    if units is not None:
        names = [b"total", b"scripted", *(f"unit:{u}".encode() for u in units)]
        ledger = {k: v for k, v in zip(names, ledger, strict=True) if v is not None}
    return control_from(raw, ledger, earlier)


def control_from(
    raw: dict[bytes, bytes], ledger: dict[bytes, bytes], earlier: bytes | None
) -> Control:
    """The controls from the control hash, the spend ledger (its `unit:` shares, when
    read, become `unit_spent`) and what an earlier DevLoop counted."""
    fields = {k.decode(): v.decode("utf-8", errors="replace") for k, v in raw.items()}
    shares = {k.decode()[5:]: from_nano(int(v)) for k, v in ledger.items()
              if k.startswith(b"unit:")}
    return Control(
        max_usd=float(fields["max_usd"]) if "max_usd" in fields else None,
        spent_usd=_total(ledger.get(b"total"), earlier),
        default_max_usd=(float(fields["default_max_usd"]) if "default_max_usd" in fields
                         else None),
        scripted_usd=from_nano(int(ledger.get(b"scripted") or 0)),
        unit_spent=shares,
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
    """Set a person's cap in dollars, in place of the default (None removes it)."""
    if max_usd is None:
        store.client.hdel(control_key(store, pid), "max_usd")
        return
    with store.client.pipeline(transaction=True) as pipe:
        _set_cap(pipe, control_key(store, pid), max_usd)
        pipe.execute()


def _set_cap(pipe: Pipeline, key: str, max_usd: float) -> None:
    """A person's cap: the default no longer stands."""
    pipe.hset(key, "max_usd", repr(float(max_usd)))
    pipe.hdel(key, "default_max_usd")


def set_default_cap(store: RedisStore, pid: str, max_usd: float) -> None:
    """DevLoop's cap, counting real model calls only, unless a person's cap stands."""
    key = control_key(store, pid)
    if not store.client.hexists(key, "max_usd"):
        store.client.hset(key, "default_max_usd", repr(float(max_usd)))


def spend(
    store: RedisStore, pid: str, usd: float, unit: str = "", scripted: bool = False
) -> float:
    """Add one model call's cost to the project's ledger (and to `unit`'s share; `scripted`:
    a stub run's turn, priced but not paid); the total (the call reaching a cap pauses the
    project)."""
    key, nano = spend_key(store, pid), to_nano(usd)
    with store.client.pipeline(transaction=True) as pipe:
        pipe.hincrby(key, "total", nano)
        if unit:
            pipe.hincrby(key, f"unit:{check_id(unit, 'unit id')}", nano)
        if scripted:
            pipe.hincrby(key, "scripted", nano)
        else:
            pipe.hget(key, "scripted")
        pipe.get(spent_key(store, pid))
        replies = pipe.execute()
    total = _total(replies[0], replies[-1])
    real = from_nano(to_nano(total) - int(replies[-2] or 0))
    keys = [control_key(store, pid), store.keys(pid).events]
    store.client.eval(CAP_CHECK, 2, *keys, repr(total), time.time(), EVENTS_MAXLEN, repr(real))
    return total


def export_spend(store: RedisStore, pid: str, dest: Path) -> Path:
    """Write the ledger to agent-state/spend.json (the report's figures)."""
    control = read_control(store, pid)
    return write_spend(dest, control, control.unit_spent)


def write_spend(dest: Path, control: Control, shares: dict[str, float]) -> Path:
    """Write agent-state/spend.json: the ledger's total, the cap and each unit's share."""
    data = {"spent_usd": control.spent_usd, "max_usd": control.max_usd,
            "units": dict(sorted(shares.items()))}
    dest.mkdir(parents=True, exist_ok=True)
    with Dir.open(dest) as root:  # never written through a link in the project folder
        root.write_atomic(SPEND_FILE, json.dumps(data, indent=2) + "\n")
    return dest / SPEND_FILE


def stop_reason(store: RedisStore, pid: str, unit: str = "") -> str | None:
    """"budget" or "cancelled" when the project (or this unit) must not go on, else None."""
    keys = [control_key(store, pid), spend_key(store, pid), store.keys(pid).events,
            spent_key(store, pid)]
    reason = store.client.eval(STOP_REASON, 4, *keys, unit, time.time(), EVENTS_MAXLEN)
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
            _set_cap(pipe, key, max_usd)
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
    """A model provider whose every call adds its cost to the project's spend and to its
    unit's share (reassess sessions included), so the cap holds across every worker."""

    def __init__(self, inner: LLMProvider, store: RedisStore, pid: str, unit: str) -> None:
        self.inner, self.store, self.pid, self.unit = inner, store, pid, unit
        self.scripted: bool | None = None  # the run serves scripted turns (asked once)

    def complete(self, request: LLMRequest) -> LLMResponse:
        response = self.inner.complete(request)
        if response.cost_usd:
            if self.scripted is None:
                self.scripted = scripted_now(self.store, self.pid)
            spend(self.store, self.pid, response.cost_usd, self.unit, self.scripted)
        return response


def steps_running(store: RedisStore, pid: str) -> bool:
    """Whether any step of the project holds its lease (a session or a test run going on)."""
    return next(store.client.scan_iter(match=store.keys(pid).lease_pattern, count=500),
                None) is not None
