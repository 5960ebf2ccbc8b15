"""A project's controls and spend in Redis: the cap, the ledger, pauses and cancels.

The spend hash counts whole nanodollars with HINCRBY (concurrent workers never lose an
update); the call that reaches the cap pauses the project in the same script that checks
it, and so does a stop check that finds the cap already spent.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from devloop.core.ids import check_id
from devloop.core.money import from_nano, to_nano
from devloop.store.base import StoreBase
from devloop.store.keys import EVENTS_MAXLEN

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


def total_usd(nano: bytes | int | None, earlier: bytes | float | None) -> float:
    """The ledger's total in dollars, with what an earlier DevLoop counted."""
    return from_nano(int(nano or 0) + to_nano(float(earlier or 0.0)))


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
        spent_usd=total_usd(ledger.get(b"total"), earlier),
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


class ControlMixin(StoreBase):
    """The cap, the spend ledger, pauses, cancels, the cancel epoch and the console's URL."""

    def read_control(self, pid: str, units: Sequence[str] | None = None) -> Control:
        """The project's controls, in one round trip; with units, only their shares of the
        spend (the ledger holds one per unit that spent: the console reads one unit's)."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.control)
            if units is None:
                pipe.hgetall(keys.spend)
            else:
                pipe.hmget(keys.spend, ["total", "scripted", *(f"unit:{u}" for u in units)])
            pipe.get(keys.spent)
            raw, ledger, earlier = pipe.execute()
        if units is not None:
            names = [b"total", b"scripted", *(f"unit:{u}".encode() for u in units)]
            ledger = {k: v for k, v in zip(names, ledger, strict=True) if v is not None}
        return control_from(raw, ledger, earlier)

    def control_epoch(self, pid: str) -> int:
        """How many cancels the project has seen."""
        return int(self.client.hget(self.keys(pid).control, "epoch") or 0)

    def bump_epoch(self, pid: str) -> int:
        """Start a new epoch (a cancel); the new one."""
        return int(self.client.hincrby(self.keys(pid).control, "epoch", 1))

    def set_max_usd(self, pid: str, max_usd: float | None) -> None:
        """Set a person's cap in dollars, in place of the default (None removes it)."""
        key = self.keys(pid).control
        if max_usd is None:
            self.client.hdel(key, "max_usd")
            return
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(key, "max_usd", repr(float(max_usd)))
            pipe.hdel(key, "default_max_usd")  # a person's cap: the default no longer stands
            pipe.execute()

    def set_default_cap(self, pid: str, max_usd: float) -> None:
        """DevLoop's cap, counting real model calls only, unless a person's cap stands."""
        key = self.keys(pid).control
        if not self.client.hexists(key, "max_usd"):
            self.client.hset(key, "default_max_usd", repr(float(max_usd)))

    def add_spend(self, pid: str, usd: float, unit: str = "", scripted: bool = False) -> float:
        """Add one model call's cost to the ledger (and to `unit`'s share); the total. The
        call that reaches a cap pauses the project."""
        keys, nano = self.keys(pid), to_nano(usd)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hincrby(keys.spend, "total", nano)
            if unit:
                pipe.hincrby(keys.spend, f"unit:{check_id(unit, 'unit id')}", nano)
            if scripted:
                pipe.hincrby(keys.spend, "scripted", nano)
            else:
                pipe.hget(keys.spend, "scripted")
            pipe.get(keys.spent)
            replies = pipe.execute()
        total = total_usd(replies[0], replies[-1])
        real = from_nano(to_nano(total) - int(replies[-2] or 0))
        self.client.eval(CAP_CHECK, 2, keys.control, keys.events, repr(total), time.time(),
                         EVENTS_MAXLEN, repr(real))
        return total

    def stop_reason(self, pid: str, unit: str = "") -> str | None:
        """"budget" or "cancelled" when the project (or this unit) must not go on, else
        None; a cap already spent pauses the project."""
        keys = self.keys(pid)
        reason = self.client.eval(STOP_REASON, 4, keys.control, keys.spend, keys.events,
                                  keys.spent, unit, time.time(), EVENTS_MAXLEN)
        return reason.decode() if isinstance(reason, bytes) else reason or None

    def pause(self, pid: str, reason: str) -> bool:
        """Pause the project (reason "budget" or "cancelled"); False when it already was."""
        keys = self.keys(pid)
        if not self.client.hsetnx(keys.control, "paused", reason):
            return False
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hset(keys.control, "paused_at", time.time())
            pipe.xadd(keys.events, {"kind": "paused", "reason": reason},
                      maxlen=EVENTS_MAXLEN, approximate=True)
            pipe.execute()
        return True

    def mark_unit_cancelled(self, pid: str, unit: str, on: bool) -> None:
        """Set (or clear) a unit's cancel: its running session stops before its next turn."""
        name = f"cancel:{check_id(unit, 'unit id')}"
        if on:
            self.client.hset(self.keys(pid).control, name, "1")
        else:
            self.client.hdel(self.keys(pid).control, name)

    def clear_pause(
        self, pid: str, max_usd: float | None = None, units: bool = True
    ) -> Control:
        """Lift a pause and (with `units`) every unit's cancel, optionally with a new cap;
        the controls now."""
        keys = self.keys(pid)
        before = self.read_control(pid)
        cancels = [f"cancel:{u}" for u in before.cancelled_units] if units else []
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hdel(keys.control, "paused", "paused_at", *cancels)
            if max_usd is not None:
                pipe.hset(keys.control, "max_usd", repr(float(max_usd)))
                pipe.hdel(keys.control, "default_max_usd")
            if before.paused:
                pipe.xadd(keys.events, {"kind": "resumed"}, maxlen=EVENTS_MAXLEN,
                          approximate=True)
            pipe.execute()
        return self.read_control(pid)

    def set_console_url(self, pid: str, url: str | None) -> None:
        """Where the project's console is (without its token), or forget it."""
        if url:
            self.client.hset(self.keys(pid).control, "console_url", url)
        else:
            self.client.hdel(self.keys(pid).control, "console_url")

    def count_spec_edit(self, pid: str, unit: str) -> int:
        """Count one more edit of the unit's spec by a person; how many there were."""
        name = f"spec:{check_id(unit, 'unit id')}"
        return int(self.client.hincrby(self.keys(pid).control, name, 1))

    def run_llm(self, pid: str) -> str | None:
        """The model of the run driving the project now ("stub", ...), if one is known."""
        raw = self.client.get(self.keys(pid).llm)
        return raw.decode("utf-8", errors="replace") if raw is not None else None

    def set_run_llm(self, pid: str, llm: str | None) -> None:
        """Remember the model of the run driving the project (None: it is not known)."""
        if llm is None:
            self.client.delete(self.keys(pid).llm)
        else:
            self.client.set(self.keys(pid).llm, llm)
