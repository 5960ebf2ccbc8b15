"""Unit state: one JSON document per unit, replaced by compare-and-set on (status, attempt).

Every write is also an entry of the project's live events stream (`Keys.events`), in the
same round trip, so a console sees each change without polling: a "state" entry per unit,
or for a cascade (a blocked unit's downstream) one "cascade" entry per batch of units.
`event_states` reads both. What must never be apart from a change (the loop's timeline event,
the follow-up still owed, a step record) rides in the same script (`WithState`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devloop.store import scripts
from devloop.store.base import StoreBase
from devloop.store.fence import Fence, fenced
from devloop.store.keys import EVENTS_MAXLEN
from devloop.store.records import UnitState

CASCADE_BATCH = 500  # units per script call of cascade_states, and per events entry


class StateMixin(StoreBase):
    """`get_state`, `put_state` and `cas_state`."""

    def get_state(self, pid: str, unit: str) -> UnitState:
        """The unit's state; a unit never written is pending at attempt 0."""
        raw = self.client.get(self.keys(pid).state(unit))
        return UnitState.model_validate_json(raw) if raw else UnitState()

    def get_states(self, pid: str, units: list[str]) -> dict[str, UnitState]:
        """Every listed unit's state, in one round trip (MGET)."""
        keys = self.keys(pid)
        raws = self.client.mget([keys.state(u) for u in units]) if units else []
        return {
            u: UnitState.model_validate_json(raw) if raw else UnitState()
            for u, raw in zip(units, raws, strict=True)
        }

    def put_state(self, pid: str, unit: str, state: UnitState) -> None:
        """Overwrite the unit's state unconditionally (imports, `devloop unblock`)."""
        self.put_states(pid, {unit: state})

    def put_states(self, pid: str, states: dict[str, UnitState]) -> None:
        """put_state for each unit, in one round trip."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            for unit, state in states.items():
                pipe.set(keys.state(unit), state.model_dump_json())
                pipe.xadd(keys.events, state_event(unit, state),
                          maxlen=EVENTS_MAXLEN, approximate=True)
            pipe.execute()

    def cascade_states(
        self, pid: str, status: str, by: str, changes: Mapping[str, tuple[UnitState, UnitState]]
    ) -> list[str]:
        """Move many units to `status` (unit -> (the state read, the new state)), each only
        while it is still at the read state's (status, attempt), in one round trip; the
        units moved, in the order given.

        The events stream gets one "cascade" entry (units caused to move by `by`, as
        `event_states` reads it) per CASCADE_BATCH units, not an entry per unit: a blocked
        root's downstream is the whole project, which would flood every reader and push
        other entries past the stream's cap.
        """
        keys = self.keys(pid)
        units = list(changes)
        batches = [units[i : i + CASCADE_BATCH] for i in range(0, len(units), CASCADE_BATCH)]
        with self.client.pipeline(transaction=False) as pipe:
            for batch in batches:
                args: list[Any] = [EVENTS_MAXLEN, status, by]
                for unit in batch:
                    old, new = changes[unit]
                    if new.status != status:
                        raise ValueError(f"{unit}: a cascade to {status} moved it to {new.status}")
                    args += [unit, old.status, old.attempt, new.model_dump_json(), new.attempt]
                # EVAL, not the registered script: in a pipeline that asks SCRIPT EXISTS first.
                pipe.eval(scripts.CASCADE_STATES, 1 + len(batch), keys.events,
                          *(keys.state(u) for u in batch), *args)
            replies = pipe.execute() if batches else []
        moved = {u.decode() for reply in replies for u in reply}
        return [u for u in units if u in moved]

    def start_units(
        self, pid: str, units: list[str], state: UnitState,
        timeline_lines: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Move each listed unit from pending (attempt 0) to state, in one round trip, each
        with its timeline line (if any) in the same step; the units that were still pending
        (the others were started by someone else)."""
        if not units:
            return []
        with self.client.pipeline(transaction=False) as pipe:
            for unit in units:
                line = WithState((timeline_lines or {}).get(unit, ""))
                keys, args = self._cas_call(pid, unit, "pending", 0, state, line)
                self._cas_state(keys=keys, args=args, client=pipe)
            won = pipe.execute()
        return [unit for unit, ok in zip(units, won, strict=True) if ok]

    def cas_state(
        self,
        pid: str,
        unit: str,
        expected_status: str,
        expected_attempt: int,
        new_state: UnitState,
        fence: Fence | None = None,
        with_it: WithState | None = None,
    ) -> bool:
        """Replace the state only if it is still (expected_status, expected_attempt); with a
        fence, only while the step's lease is still its own (LeaseLost if not); what
        `with_it` holds lands in the same step, or nothing does."""
        keys, args = self._cas_call(pid, unit, expected_status, expected_attempt, new_state,
                                    with_it)
        with fenced(fence):
            done = self._cas_state(keys=keys + ([fence.lease] if fence else []),
                                   args=args + ([fence.owner] if fence else []))
        return bool(done)

    def _cas_call(
        self, pid: str, unit: str, expected_status: str, expected_attempt: int, state: UnitState,
        with_it: WithState | None = None,
    ) -> tuple[list[str], list[Any]]:
        """CAS_STATE's keys and arguments, before any fence."""
        keys, also = self.keys(pid), with_it or WithState()
        record_name, record = also.record or ("", "")
        return ([keys.state(unit), keys.events, keys.stream("timeline"),
                 keys.unit_ledger("timeline", unit), keys.ledger_index, keys.followups,
                 keys.steps(unit)],
                [expected_status, expected_attempt, state.model_dump_json(), unit,
                 state.status, state.attempt, EVENTS_MAXLEN, also.timeline_line.removesuffix("\n"),
                 "timeline", also.followup, record_name, record])

    def followups(self, pid: str) -> dict[str, str]:
        """Every unit's follow-up still to do (JSON), as its transition left it."""
        raw = self.client.hgetall(self.keys(pid).followups)
        return {k.decode(): v.decode() for k, v in raw.items()}

    def swap_followup(self, pid: str, unit: str, held: str, new: str = "") -> bool:
        """Replace the unit's follow-up `held` by `new` ('' drops it), only while it is still
        `held`: whether it was."""
        keys = [self.keys(pid).followups]
        return bool(self._swap_followup(keys=keys, args=[unit, held, new]))


@dataclass(frozen=True)
class WithState:
    """What lands in the same step as a state change, or not at all: the loop's timeline
    line, the follow-up still to do after it (JSON), a step record (name, JSON) unless one
    is stored under that name."""

    timeline_line: str = ""
    followup: str = ""
    record: tuple[str, str] | None = None


def event_states(fields: Mapping[bytes, bytes]) -> list[tuple[str, str, int]]:
    """The (unit, status, attempt) of every state change an events entry tells: one for a
    "state" entry, each unit of a "cascade" entry, none for any other kind."""
    kind = fields.get(b"kind")
    status = fields.get(b"status", b"pending").decode()
    if kind == b"state":
        return [(fields.get(b"unit", b"").decode(), status, int(fields.get(b"attempt", b"0")))]
    if kind != b"cascade":
        return []
    units = fields.get(b"units", b"").decode().split()
    attempts = [int(a) for a in fields.get(b"attempts", b"").split()]
    return [(unit, status, attempt) for unit, attempt in zip(units, attempts, strict=True)]


def state_event(unit: str, state: UnitState) -> dict[Any, Any]:
    """The live event of a state write: which unit, its status and attempt (and whether it
    was decided under scripted turns)."""
    event = {"kind": "state", "unit": unit, "status": state.status, "attempt": state.attempt}
    return {**event, "scripted": 1} if state.scripted else event
