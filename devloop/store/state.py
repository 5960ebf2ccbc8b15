"""Unit state: one JSON document per unit, replaced by compare-and-set on (status, attempt).

Every write is also an entry of the project's live events stream (`Keys.events`), in the
same round trip, so a console sees each change without polling.
"""

from __future__ import annotations

from typing import Any

from devloop.store.base import StoreBase
from devloop.store.fence import Fence, fenced
from devloop.store.keys import EVENTS_MAXLEN
from devloop.store.records import UnitState


class StateMixin(StoreBase):
    """`get_state`, `put_state` and `cas_state`."""

    def get_state(self, pid: str, unit: str) -> UnitState:
        """The unit's state; a unit never written is pending at attempt 0."""
        raw = self.client.get(self.keys(pid).state(unit))
        return UnitState.model_validate_json(raw) if raw else UnitState()

    def get_states(self, pid: str, units: list[str]) -> dict[str, UnitState]:
        """Every listed unit's state, in one round trip (MGET)."""
        raws = self.client.mget([self.keys(pid).state(u) for u in units]) if units else []
        return {
            u: UnitState.model_validate_json(raw) if raw else UnitState()
            for u, raw in zip(units, raws, strict=True)
        }

    def put_state(self, pid: str, unit: str, state: UnitState) -> None:
        """Overwrite the unit's state unconditionally (imports, `devloop unblock`)."""
        self.put_states(pid, {unit: state})

    def put_states(self, pid: str, states: dict[str, UnitState]) -> None:
        """put_state for each unit, in one round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for unit, state in states.items():
                pipe.set(self.keys(pid).state(unit), state.model_dump_json())
                pipe.xadd(self.keys(pid).events, state_event(unit, state),
                          maxlen=EVENTS_MAXLEN, approximate=True)
            pipe.execute()

    def start_units(self, pid: str, units: list[str], state: UnitState) -> list[str]:
        """Move each listed unit from pending (attempt 0) to state, in one round trip; the
        units that were still pending (the others were started by someone else)."""
        if not units:
            return []
        with self.client.pipeline(transaction=False) as pipe:
            for unit in units:
                keys, args = self._cas_call(pid, unit, "pending", 0, state)
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
    ) -> bool:
        """Replace the state only if it is still (expected_status, expected_attempt); with a
        fence, only while the step's lease is still its own (LeaseLost if not)."""
        keys, args = self._cas_call(pid, unit, expected_status, expected_attempt, new_state)
        with fenced(fence):
            done = self._cas_state(keys=keys + ([fence.lease] if fence else []),
                                   args=args + ([fence.owner] if fence else []))
        return bool(done)

    def _cas_call(
        self, pid: str, unit: str, expected_status: str, expected_attempt: int, state: UnitState
    ) -> tuple[list[str], list[Any]]:
        """CAS_STATE's keys and arguments, before any fence."""
        keys = self.keys(pid)
        return ([keys.state(unit), keys.events],
                [expected_status, expected_attempt, state.model_dump_json(), unit,
                 state.status, state.attempt, EVENTS_MAXLEN])


def state_event(unit: str, state: UnitState) -> dict[Any, Any]:
    """The live event of a state write: which unit, its status and attempt (and whether it
    was decided under scripted turns)."""
    event = {"kind": "state", "unit": unit, "status": state.status, "attempt": state.attempt}
    return {**event, "scripted": 1} if state.scripted else event
