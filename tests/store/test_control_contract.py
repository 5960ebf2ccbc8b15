"""The project's controls, on every store: the spend every worker adds, the pause at the
cap, the cancel flags a session checks each turn, and task ids a cancel never reuses. Each
test runs on RedisStore and on MemoryStore with the same assertions."""

from __future__ import annotations

import threading

from devloop.fleet.control import (
    StopFlag,
    bump_epoch,
    clear_pause,
    mark_unit_cancelled,
    read_control,
    set_default_cap,
    set_max_usd,
    spend,
    stop_reason,
)
from devloop.fleet.messages import StepMsg
from devloop.store import RedisStore
from devloop.store.inmemory import MemoryStore
from tests.store.conftest import pause_events

AnyStore = RedisStore | MemoryStore
PID = "p-ctl"


def test_concurrent_spend_loses_no_cent_and_the_call_reaching_the_cap_pauses_once(
    any_store: AnyStore,
) -> None:
    set_max_usd(any_store, PID, 1.0)
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(25):
            spend(any_store, PID, 0.01)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    control = read_control(any_store, PID)
    assert round(control.spent_usd, 6) == 2.0
    assert control.paused == "budget" and control.paused_at is not None
    assert pause_events(any_store, PID) == ["budget"]  # announced once, by the call that
    # crossed the cap


def test_spend_under_the_cap_or_without_one_never_pauses(any_store: AnyStore) -> None:
    spend(any_store, PID, 5.0)
    assert read_control(any_store, PID).paused is None
    set_max_usd(any_store, PID, 10.0)
    spend(any_store, PID, 4.99)
    assert stop_reason(any_store, PID, "a") is None


def test_a_cap_already_spent_stops_the_next_step_before_it_starts(
    any_store: AnyStore,
) -> None:
    spend(any_store, PID, 3.0)
    set_max_usd(any_store, PID, 2.0)  # lowered below what was spent
    assert stop_reason(any_store, PID, "a") == "budget"
    assert read_control(any_store, PID).paused == "budget"


def test_a_units_cancel_stops_only_that_unit(any_store: AnyStore) -> None:
    mark_unit_cancelled(any_store, PID, "a", True)
    assert stop_reason(any_store, PID, "a") == "cancelled"
    assert stop_reason(any_store, PID, "b") is None
    assert read_control(any_store, PID).cancelled_units == ("a",)


def test_the_stop_flag_a_session_checks_each_turn_follows_the_store(any_store: AnyStore) -> None:
    flag = StopFlag(any_store, PID, "a")
    assert not flag.is_set()
    set_max_usd(any_store, PID, 0.5)
    spend(any_store, PID, 0.5)
    assert flag.is_set() and flag.reason == "budget"


def test_resuming_lifts_the_pause_sets_a_new_cap_and_keeps_what_was_spent(
    any_store: AnyStore,
) -> None:
    set_max_usd(any_store, PID, 1.0)
    spend(any_store, PID, 1.5)
    mark_unit_cancelled(any_store, PID, "a", True)
    control = clear_pause(any_store, PID, 5.0, units=False)
    assert (control.paused, control.max_usd, control.spent_usd) == (None, 5.0, 1.5)
    assert control.cancelled_units == ("a",)  # a run keeps a person's unit cancel
    assert clear_pause(any_store, PID).cancelled_units == ()  # a resume lifts it
    assert stop_reason(any_store, PID, "a") is None


def test_chains_sent_after_a_cancel_carry_task_ids_it_never_revoked(
    any_store: AnyStore,
) -> None:
    before = StepMsg(pid=PID, unit_id="a", attempt=2).task_id("coder")
    epoch = bump_epoch(any_store, PID)
    after = StepMsg(pid=PID, unit_id="a", attempt=2, epoch=epoch).task_id("coder")
    assert before == f"{PID}:a:coder:2" and after == f"{PID}:a:coder:2~1"


def test_the_default_cap_counts_real_calls_only_and_pauses_once_they_reach_it(
    any_store: AnyStore,
) -> None:
    set_default_cap(any_store, PID, 25.0)
    for _ in range(40):  # $40 of scripted turns: priced as Claude, nothing spent
        spend(any_store, PID, 1.0, "a", scripted=True)
    assert stop_reason(any_store, PID, "a") is None
    spend(any_store, PID, 24.0, "a")
    control = read_control(any_store, PID)
    assert (control.paused, control.spent_usd, control.real_spent_usd) == (None, 64.0, 24.0)
    spend(any_store, PID, 1.0, "b")  # the real call reaching $25
    control = read_control(any_store, PID)
    assert control.paused == "budget" and control.default_cap_reached
    assert control.unit_spent == {"a": 64.0, "b": 1.0}  # the shares count every call


def test_a_cap_already_spent_on_real_calls_stops_the_next_step_under_the_default(
    any_store: AnyStore,
) -> None:
    spend(any_store, PID, 30.0, "a", scripted=True)
    spend(any_store, PID, 26.0, "a")
    set_default_cap(any_store, PID, 25.0)
    assert stop_reason(any_store, PID, "a") == "budget"
    clear_pause(any_store, PID)
    set_default_cap(any_store, PID, 60.0)  # above the real $26, under the $56 in all
    assert stop_reason(any_store, PID, "a") is None


def test_a_persons_cap_replaces_the_default_and_counts_scripted_turns_too(
    any_store: AnyStore,
) -> None:
    set_default_cap(any_store, PID, 25.0)
    clear_pause(any_store, PID, 2.0)  # `devloop resume DIR --max-usd 2`
    control = read_control(any_store, PID)
    assert (control.max_usd, control.default_max_usd) == (2.0, None)
    set_default_cap(any_store, PID, 25.0)  # a later run without a cap keeps the person's
    assert read_control(any_store, PID).default_max_usd is None
    spend(any_store, PID, 2.0, "a", scripted=True)
    control = read_control(any_store, PID)
    assert control.paused == "budget" and not control.default_cap_reached

