"""Unit state: one JSON document per unit, replaced by compare-and-set on (status, attempt)."""

from __future__ import annotations

from devloop.store.base import StoreBase
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

    def cas_state(
        self,
        pid: str,
        unit: str,
        expected_status: str,
        expected_attempt: int,
        new_state: UnitState,
    ) -> bool:
        """Replace the state only if it is still (expected_status, expected_attempt)."""
        done = self._cas_state(
            keys=[self.keys(pid).state(unit)],
            args=[expected_status, expected_attempt, new_state.model_dump_json()],
        )
        return bool(done)
