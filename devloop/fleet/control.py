"""A project's controls: its budget, the money spent, pauses and cancels.

The store keeps them (store/control.py: the control hash, the spend ledger in whole
nanodollars, and what an earlier DevLoop counted in float dollars). The spend ledger is
the ledger of record: the cap is enforced against its total, and every figure shown
(status, the live table, the end of a run, the console, the report through
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
from pathlib import Path

from devloop.fleet.marks import scripted_now
from devloop.llm.base import LLMProvider, LLMRequest, LLMResponse
from devloop.safe.safedir import Dir
from devloop.store.control import Control, control_from
from devloop.store.protocols import ControlStore

__all__ = ["Control", "control_from"]

PAUSES = ("budget", "cancelled")
SPEND_FILE = "agent-state/spend.json"  # the ledger as exported to the folder (the report's)


def read_control(store: ControlStore, pid: str, units: list[str] | None = None) -> Control:
    """The project's controls, in one round trip; with units, only their shares of the spend
    (the ledger holds one per unit that spent: the console reads one unit's by key)."""
    return store.read_control(pid, units)


def current_epoch(store: ControlStore, pid: str) -> int:
    """How many cancels the project has seen: chains sent now carry it in their task ids."""
    return store.control_epoch(pid)


def set_max_usd(store: ControlStore, pid: str, max_usd: float | None) -> None:
    """Set a person's cap in dollars, in place of the default (None removes it)."""
    store.set_max_usd(pid, max_usd)


def set_default_cap(store: ControlStore, pid: str, max_usd: float) -> None:
    """DevLoop's cap, counting real model calls only, unless a person's cap stands."""
    store.set_default_cap(pid, max_usd)


def spend(
    store: ControlStore, pid: str, usd: float, unit: str = "", scripted: bool = False
) -> float:
    """Add one model call's cost to the project's ledger (and to `unit`'s share; `scripted`:
    a stub run's turn, priced but not paid); the total (the call reaching a cap pauses the
    project)."""
    return store.add_spend(pid, usd, unit, scripted)


def export_spend(store: ControlStore, pid: str, dest: Path) -> Path:
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


def stop_reason(store: ControlStore, pid: str, unit: str = "") -> str | None:
    """"budget" or "cancelled" when the project (or this unit) must not go on, else None."""
    return store.stop_reason(pid, unit)


def pause(store: ControlStore, pid: str, reason: str) -> bool:
    """Pause the project (reason "budget" or "cancelled"); False when it already was."""
    return store.pause(pid, reason)


def bump_epoch(store: ControlStore, pid: str) -> int:
    """Start a new epoch (a cancel): chains sent from now on get task ids never revoked."""
    return store.bump_epoch(pid)


def mark_unit_cancelled(store: ControlStore, pid: str, unit: str, on: bool) -> None:
    """Set (or clear) a unit's cancel: its running session stops before its next turn."""
    store.mark_unit_cancelled(pid, unit, on)


def clear_pause(
    store: ControlStore, pid: str, max_usd: float | None = None, units: bool = True
) -> Control:
    """Lift a pause and (with `units`) every unit's cancel, optionally with a new cap; the
    controls now."""
    return store.clear_pause(pid, max_usd, units)


def set_console_url(store: ControlStore, pid: str, url: str | None) -> None:
    """Where the project's console is (without its token): the webhook links to it."""
    store.set_console_url(pid, url)


class StopFlag(threading.Event):
    """The cancel flag a session checks before each turn: set here, or by the project's
    controls in Redis (a pause, a spent budget, this unit's cancel)."""

    def __init__(self, store: ControlStore, pid: str, unit: str) -> None:
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

    def __init__(self, inner: LLMProvider, store: ControlStore, pid: str, unit: str) -> None:
        self.inner, self.store, self.pid, self.unit = inner, store, pid, unit
        self.scripted: bool | None = None  # the run serves scripted turns (asked once)

    def complete(self, request: LLMRequest) -> LLMResponse:
        response = self.inner.complete(request)
        if response.cost_usd:
            if self.scripted is None:
                self.scripted = scripted_now(self.store, self.pid)
            spend(self.store, self.pid, response.cost_usd, self.unit, self.scripted)
        return response


def steps_running(store: ControlStore, pid: str) -> bool:
    """Whether any step of the project holds its lease (a session or a test run going on)."""
    return store.any_lease(pid)
