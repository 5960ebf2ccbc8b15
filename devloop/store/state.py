"""Unit state: one JSON document per unit, replaced by compare-and-set on (status, attempt)."""

from __future__ import annotations

from devloop.store.base import StoreBase
from devloop.store.fence import Fence, fenced
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
        self.client.set(self.keys(pid).state(unit), state.model_dump_json())

    def put_states(self, pid: str, states: dict[str, UnitState]) -> None:
        """put_state for each unit, in one round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for unit, state in states.items():
                pipe.set(self.keys(pid).state(unit), state.model_dump_json())
            pipe.execute()

    def start_units(self, pid: str, units: list[str], state: UnitState) -> list[str]:
        """Move each listed unit from pending (attempt 0) to state, in one round trip; the
        units that were still pending (the others were started by someone else)."""
        if not units:
            return []
        data = state.model_dump_json()
        with self.client.pipeline(transaction=False) as pipe:
            for unit in units:
                self._cas_state(keys=[self.keys(pid).state(unit)], args=["pending", 0, data],
                                client=pipe)
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
        keys = [self.keys(pid).state(unit)] + ([fence.lease] if fence else [])
        args = [expected_status, expected_attempt, new_state.model_dump_json()]
        with fenced(fence):
            done = self._cas_state(keys=keys, args=args + ([fence.owner] if fence else []))
        return bool(done)
