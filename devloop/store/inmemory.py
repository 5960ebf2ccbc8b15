"""MemoryStore: the store's controls, step records, releases and reviews in plain Python.

It answers the protocols of store/protocols.py as RedisStore does (the contract tests in
tests/store/ run one set of assertions on both), so the fleet's decisions over those
concerns are tested without a server. One lock makes each method one atomic step, as each
Redis method is one script or transaction. What only Redis gives (Lua compare-and-set
across processes, fencing against a paused worker, streams, the AOF) keeps RedisStore.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from devloop.core.ids import check_id
from devloop.core.money import from_nano, to_nano
from devloop.store.control import Control, control_from, total_usd
from devloop.store.fence import Fence, LeaseLost
from devloop.store.keys import EVENTS_MAXLEN, Keys
from devloop.store.records import UnitState
from devloop.store.steps import BegunStep

Fields = dict[str, str]


class MemoryStore:
    """Controls and spend, unit states, leases, step records, release marks and reviews of
    any number of projects, in this process's memory."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._control: defaultdict[str, Fields] = defaultdict(dict)
        self._spend: defaultdict[str, dict[str, int]] = defaultdict(dict)
        self._earlier: dict[str, float] = {}  # dollars an earlier DevLoop counted
        self._llm: dict[str, str] = {}
        self._states: dict[tuple[str, str], UnitState] = {}
        self._leases: dict[str, tuple[str, float]] = {}  # lease key -> (owner, deadline)
        self._steps: defaultdict[tuple[str, str], dict[str, bytes]] = defaultdict(dict)
        self._progress: defaultdict[str, dict[str, bytes]] = defaultdict(dict)
        self._env_error: dict[str, str] = {}
        self._dispatched: dict[tuple[str, str], str] = {}
        self._finished: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        self._definitions: defaultdict[str, dict[str, bytes]] = defaultdict(dict)
        self._locks: dict[str, float] = {}  # reconcile lock of a pid -> its deadline
        self._approved: dict[tuple[str, str], tuple[dict[str, bytes], Fields]] = {}
        self.events: defaultdict[str, list[dict[str, str]]] = defaultdict(list)

    def keys(self, pid: str) -> Keys:
        """The key names of project pid (a lease is known by its key, as in a Fence)."""
        return Keys(pid)

    def _event(self, pid: str, fields: dict[str, str]) -> None:
        events = self.events[pid]
        events.append(fields)
        del events[:-EVENTS_MAXLEN]

    # -- controls and spend ---------------------------------------------------------------

    def read_control(self, pid: str, units: Sequence[str] | None = None) -> Control:
        """The project's controls; with units, only their shares of the spend."""
        with self._lock:
            ledger = dict(self._spend[pid])
            if units is not None:
                wanted = {"total", "scripted", *(f"unit:{u}" for u in units)}
                ledger = {k: v for k, v in ledger.items() if k in wanted}
            earlier = self._earlier.get(pid)
            return control_from(
                {k.encode(): v.encode() for k, v in self._control[pid].items()},
                {k.encode(): str(v).encode() for k, v in ledger.items()},
                repr(earlier).encode() if earlier is not None else None,
            )

    def control_epoch(self, pid: str) -> int:
        """How many cancels the project has seen."""
        with self._lock:
            return int(self._control[pid].get("epoch", 0))

    def bump_epoch(self, pid: str) -> int:
        """Start a new epoch (a cancel); the new one."""
        with self._lock:
            epoch = self.control_epoch(pid) + 1
            self._control[pid]["epoch"] = str(epoch)
            return epoch

    def set_max_usd(self, pid: str, max_usd: float | None) -> None:
        """Set a person's cap in dollars, in place of the default (None removes it)."""
        with self._lock:
            control = self._control[pid]
            if max_usd is None:
                control.pop("max_usd", None)
                return
            control["max_usd"] = repr(float(max_usd))
            control.pop("default_max_usd", None)

    def set_default_cap(self, pid: str, max_usd: float) -> None:
        """DevLoop's cap, counting real model calls only, unless a person's cap stands."""
        with self._lock:
            if "max_usd" not in self._control[pid]:
                self._control[pid]["default_max_usd"] = repr(float(max_usd))

    def _reached(self, pid: str, spent: float, real: float) -> bool:
        control = self._control[pid]
        if "max_usd" in control:
            return spent >= float(control["max_usd"])
        return "default_max_usd" in control and real >= float(control["default_max_usd"])

    def _pause_for_budget(self, pid: str) -> None:
        self._control[pid].update(paused="budget", paused_at=repr(time.time()))
        self._event(pid, {"kind": "paused", "reason": "budget"})

    def add_spend(self, pid: str, usd: float, unit: str = "", scripted: bool = False) -> float:
        """Add one model call's cost to the ledger (and to `unit`'s share); the total. The
        call that reaches a cap pauses the project."""
        nano = to_nano(usd)
        with self._lock:
            ledger = self._spend[pid]
            ledger["total"] = ledger.get("total", 0) + nano
            if unit:
                name = f"unit:{check_id(unit, 'unit id')}"
                ledger[name] = ledger.get(name, 0) + nano
            if scripted:
                ledger["scripted"] = ledger.get("scripted", 0) + nano
            total = total_usd(ledger["total"], self._earlier.get(pid))
            real = from_nano(to_nano(total) - ledger.get("scripted", 0))
            if self._reached(pid, total, real) and "paused" not in self._control[pid]:
                self._pause_for_budget(pid)
            return total

    def stop_reason(self, pid: str, unit: str = "") -> str | None:
        """"budget" or "cancelled" when the project (or this unit) must not go on, else
        None; a cap already spent pauses the project."""
        with self._lock:
            control = self._control[pid]
            if "paused" in control:
                return control["paused"]
            if unit and f"cancel:{unit}" in control:
                return "cancelled"
            ledger = self._spend[pid]
            spent = ledger.get("total", 0) / 1e9 + self._earlier.get(pid, 0.0)
            if self._reached(pid, spent, spent - ledger.get("scripted", 0) / 1e9):
                self._pause_for_budget(pid)
                return "budget"
            return None

    def pause(self, pid: str, reason: str) -> bool:
        """Pause the project (reason "budget" or "cancelled"); False when it already was."""
        with self._lock:
            if "paused" in self._control[pid]:
                return False
            self._control[pid].update(paused=reason, paused_at=repr(time.time()))
            self._event(pid, {"kind": "paused", "reason": reason})
            return True

    def mark_unit_cancelled(self, pid: str, unit: str, on: bool) -> None:
        """Set (or clear) a unit's cancel: its running session stops before its next turn."""
        name = f"cancel:{check_id(unit, 'unit id')}"
        with self._lock:
            if on:
                self._control[pid][name] = "1"
            else:
                self._control[pid].pop(name, None)

    def clear_pause(
        self, pid: str, max_usd: float | None = None, units: bool = True
    ) -> Control:
        """Lift a pause and (with `units`) every unit's cancel, optionally with a new cap;
        the controls now."""
        with self._lock:
            control = self._control[pid]
            was_paused = "paused" in control
            for name in ("paused", "paused_at"):
                control.pop(name, None)
            if units:
                for name in [k for k in control if k.startswith("cancel:")]:
                    del control[name]
            if max_usd is not None:
                self.set_max_usd(pid, max_usd)
            if was_paused:
                self._event(pid, {"kind": "resumed"})
            return self.read_control(pid)

    def set_console_url(self, pid: str, url: str | None) -> None:
        """Where the project's console is (without its token), or forget it."""
        with self._lock:
            if url:
                self._control[pid]["console_url"] = url
            else:
                self._control[pid].pop("console_url", None)

    def count_spec_edit(self, pid: str, unit: str) -> int:
        """Count one more edit of the unit's spec by a person; how many there were."""
        name = f"spec:{check_id(unit, 'unit id')}"
        with self._lock:
            count = int(self._control[pid].get(name, 0)) + 1
            self._control[pid][name] = str(count)
            return count

    def run_llm(self, pid: str) -> str | None:
        """The model of the run driving the project now, if one is known."""
        return self._llm.get(pid)

    def set_run_llm(self, pid: str, llm: str | None) -> None:
        """Remember the model of the run driving the project (None: it is not known)."""
        with self._lock:
            if llm is None:
                self._llm.pop(pid, None)
            else:
                self._llm[pid] = llm

    # -- unit states and leases -----------------------------------------------------------

    def get_state(self, pid: str, unit: str) -> UnitState:
        """The unit's state; a unit never written is pending at attempt 0."""
        with self._lock:
            return self._states.get((pid, unit), UnitState())

    def get_states(self, pid: str, units: list[str]) -> dict[str, UnitState]:
        """Every listed unit's state."""
        with self._lock:
            return {u: self.get_state(pid, u) for u in units}

    def put_state(self, pid: str, unit: str, state: UnitState) -> None:
        """Overwrite the unit's state unconditionally."""
        with self._lock:
            self._states[(pid, check_id(unit, "unit id"))] = state
            self._event(pid, {"kind": "state", "unit": unit, "status": state.status,
                              "attempt": str(state.attempt)})

    def _owner(self, key: str) -> str | None:
        held = self._leases.get(key)
        if held is None or held[1] <= time.monotonic():
            self._leases.pop(key, None)
            return None
        return held[0]

    def acquire_lease(
        self, pid: str, unit: str, attempt: int, role: str, owner: str, ttl_s: float
    ) -> bool:
        """Take the lease for ttl_s; True also when owner already holds it (extended)."""
        key = self.keys(pid).lease(unit, attempt, role)
        with self._lock:
            if self._owner(key) not in (None, owner):
                return False
            self._leases[key] = (owner, time.monotonic() + max(ttl_s, 0.001))
            return True

    def release(self, pid: str, unit: str, attempt: int, role: str, owner: str) -> bool:
        """Give the lease up if owner holds it; True if it was released."""
        key = self.keys(pid).lease(unit, attempt, role)
        with self._lock:
            if self._owner(key) != owner:
                return False
            del self._leases[key]
            return True

    def lease_owner(self, pid: str, unit: str, attempt: int, role: str) -> str | None:
        """Who holds the lease now, or None."""
        with self._lock:
            return self._owner(self.keys(pid).lease(unit, attempt, role))

    def lease_owners(self, pid: str, leases: list[tuple[str, int, str]]) -> list[str | None]:
        """Who holds each (unit, attempt, role) lease now (None: nobody)."""
        with self._lock:
            return [self.lease_owner(pid, *lease) for lease in leases]

    def any_lease(self, pid: str) -> bool:
        """Whether any step of the project holds its lease."""
        prefix = self.keys(pid).prefix + "lease:"
        with self._lock:
            return any(self._owner(k) for k in list(self._leases) if k.startswith(prefix))

    # -- step records, progress, releases ---------------------------------------------------

    def step_record(self, pid: str, unit: str, name: str) -> bytes | None:
        """One stored step record (JSON) by its field, or None."""
        with self._lock:
            return self._steps[(pid, unit)].get(name)

    def state_and_step_records(
        self, pid: str, unit: str, names: list[str]
    ) -> tuple[UnitState, list[bytes | None]]:
        """The unit's state and the named step records."""
        with self._lock:
            return self.get_state(pid, unit), [self.step_record(pid, unit, n) for n in names]

    def begin_step(
        self, pid: str, unit: str, attempt: int, lease_role: str, owner: str, ttl_s: float,
        name: str, coder_name: str,
    ) -> BegunStep:
        """Look the step up and take its lease (a step that ran to the end takes none)."""
        with self._lock:
            record = self.step_record(pid, unit, name)
            leased = record is None and self.acquire_lease(pid, unit, attempt, lease_role,
                                                           owner, ttl_s)
            return BegunStep(record, self.get_state(pid, unit), leased,
                             self.step_record(pid, unit, coder_name))

    def save_step_record(
        self, pid: str, unit: str, name: str, data: str, fence: Fence | None = None,
        also: Callable[[Any], object] = lambda pipe: None,
    ) -> tuple[bool, bytes]:
        """Store a record unless one is there already: (created, the stored one); with a
        fence, only while the step holds its lease (LeaseLost if not), given up with it."""
        with self._lock:
            if fence is not None:
                if self._owner(fence.lease) != fence.owner:
                    raise LeaseLost(f"lease {fence.lease} is no longer held by {fence.owner}")
                self._leases.pop(fence.lease, None)
            records = self._steps[(pid, check_id(unit, "unit id"))]
            created = name not in records
            records.setdefault(name, data.encode())
            return created, records[name]

    def step_records(self, pid: str, units: list[str]) -> dict[str, list[bytes]]:
        """Every stored step record (JSON) of each listed unit."""
        with self._lock:
            return {unit: list(self._steps[(pid, unit)].values()) for unit in units}

    def record_progress(self, pid: str, unit: str, data: str) -> None:
        """Keep the unit's running session's last step (StepProgress JSON)."""
        with self._lock:
            self._progress[pid][unit] = data.encode()

    def progress_of(self, pid: str, units: list[str]) -> dict[str, bytes]:
        """The last progress record of each listed unit that has one."""
        with self._lock:
            return {u: self._progress[pid][u] for u in units if u in self._progress[pid]}

    def environment_error(self, pid: str) -> str | None:
        """The environment problem a worker reported for this project, if any."""
        return self._env_error.get(pid) or None

    def set_environment_error(self, pid: str, why: str | None) -> None:
        """Report why no session can run here (None: forget it, a new try)."""
        with self._lock:
            if why is None:
                self._env_error.pop(pid, None)
            else:
                self._env_error[pid] = why

    def claim_root(self, pid: str, unit: str) -> bool:
        """Mark a root unit released, once; True for the first claim."""
        with self._lock:
            if (pid, unit) in self._dispatched:
                return False
            self._dispatched[(pid, check_id(unit, "unit id"))] = "root"
            return True

    def mark_dispatched(self, pid: str, units: list[str], how: str) -> None:
        """Mark units released (`again`, `reconciled`) whatever they held."""
        with self._lock:
            for unit in units:
                self._dispatched[(pid, check_id(unit, "unit id"))] = how

    def dispatched_mark(self, pid: str, unit: str) -> str | None:
        """How the unit was first released (root, again, reconciled), or None."""
        return self._dispatched.get((pid, unit))

    def claim_releases(self, pid: str, unit: str, users: dict[str, int]) -> list[str]:
        """Record that unit passed for each dependent (name -> how many dependencies it
        has); the dependents this release completes and claims, in order."""
        won = []
        with self._lock:
            for user, needs in users.items():
                finished = self._finished[(pid, check_id(user, "unit id"))]
                finished.add(unit)
                if len(finished) >= needs and (pid, user) not in self._dispatched:
                    self._dispatched[(pid, user)] = unit
                    won.append(user)
        return won

    def definitions(self, pid: str) -> dict[str, bytes]:
        """unit -> Definition (JSON) each unit was last run on."""
        with self._lock:
            return dict(self._definitions[pid])

    def record_definitions(self, pid: str, mapping: dict[str, str]) -> None:
        """Remember units' definitions (JSON) as the ones they run on from now."""
        with self._lock:
            self._definitions[pid].update({k: v.encode() for k, v in mapping.items()})

    def take_reconcile_lock(self, pid: str, ttl_s: int) -> bool:
        """Claim the project's reconcile pass for ttl_s; False while another holds it."""
        now = time.monotonic()
        with self._lock:
            if self._locks.get(pid, 0.0) > now:
                return False
            self._locks[pid] = now + ttl_s
            return True

    # -- reviews ----------------------------------------------------------------------------

    def save_approval(
        self, pid: str, unit: str, files: dict[str, bytes],
        meta: dict[str, bytes | float | int | str],
    ) -> None:
        """Make files the unit's approved version (whole), with its meta."""
        with self._lock:
            old_meta = self._approved.get((pid, unit), ({}, {}))[1]
            fields = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in meta.items()}
            self._approved[(pid, check_id(unit, "unit id"))] = (dict(files),
                                                               {**old_meta, **fields})

    def approval(self, pid: str, unit: str) -> tuple[dict[str, bytes], int | None]:
        """The unit's files as last approved and the attempt approved ({}, None: never)."""
        with self._lock:
            files, meta = self._approved.get((pid, unit), ({}, {}))
            return dict(files), int(meta["attempt"]) if "attempt" in meta else None
