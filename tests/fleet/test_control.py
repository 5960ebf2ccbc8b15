"""The project's controls in Redis itself: what an earlier DevLoop kept in its own key
still counts (the controls' behaviour on every store: tests/store/test_control_contract.py)."""

from __future__ import annotations

from devloop.fleet.control import read_control, set_max_usd, spend, stop_reason
from devloop.store import RedisStore

PID = "p-ctl"


def test_each_calls_cost_goes_to_its_units_share_and_an_earlier_float_total_still_counts(
    redis_store: RedisStore,
) -> None:
    for unit, usd in [("a", 0.1), ("b", 0.2), ("a", 0.3)]:
        spend(redis_store, PID, usd, unit)
    control = read_control(redis_store, PID)
    assert control.unit_spent == {"a": 0.4, "b": 0.2} and control.spent_usd == 0.6
    # A project an earlier DevLoop ran kept its total in float dollars: it is not lost.
    redis_store.client.set(redis_store.keys(PID).spent, "1.5")
    assert read_control(redis_store, PID).spent_usd == 2.1
    set_max_usd(redis_store, PID, 2.0)
    assert stop_reason(redis_store, PID, "a") == "budget"
