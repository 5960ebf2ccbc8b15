"""A dependency passed again with other code or another contract: its passed dependents
are tested again against it (their tester alone, a fresh attempt; red goes to the coder).

The code a dependent's runs import is its dependencies' passed code (devloop.upstream),
kept aside when each passes (`RedisStore.keep_passed`); when what is kept changes, every
passed unit downstream ran against something else, so each is re-tested once. Their own
passed code does not change, so the re-tests release nothing further.
"""

from __future__ import annotations

import time

from devloop.core import dag
from devloop.core.loop import retest
from devloop.fleet.messages import Dispatch, StepMsg
from devloop.fleet.records import StepOutcome, StepRecord
from devloop.fleet.transition import transition
from devloop.store import RedisStore

RETESTED = "upstream_changed"  # the reason on the coder step a re-test skips


def passed_again(store: RedisStore, pid: str, unit: str, epoch: int = 0) -> list[Dispatch]:
    """Keep the unit's code as passed; when it differs from what was kept before, the
    chains that re-test its passed dependents."""
    before, now = store.keep_passed(pid, unit)
    if before is None or before == now:
        return []
    record = store.project_record(pid)
    why = f"{unit} passed again with changed code or contract; re-testing against it"
    return retest_units(store, pid, dag.downstream(record.graph, unit, record.dependents), why,
                        epoch)


def retest_units(
    store: RedisStore, pid: str, units: list[str], why: str, epoch: int = 0
) -> list[Dispatch]:
    """Start a tester-only attempt for each listed unit that is passed, saying why."""
    out = []
    for unit, state in store.get_states(pid, units).items():
        if state.status != "passed":
            continue  # not run yet, or running: its next run imports the new code anyway
        now = time.time()
        new = retest(state, why).model_copy(update={"updated_at": now})
        msg = StepMsg(pid=pid, unit_id=unit, attempt=new.attempt, mode="retry",
                      skip_coder=True, epoch=epoch)
        # The tester step runs over a finished coder step: this one ran nothing.
        coder = StepRecord(
            role="coder", attempt=new.attempt, msg=msg, worker="loop", started_at=now,
            ended_at=now, status="completed", output={"reason": why},
            outcome=StepOutcome(status="completed", reason=RETESTED, summary=why),
        )
        if transition(store, pid, unit, state, new, "loop_retest", msg.run_id,
                      f"re-test: {why}", record=coder):
            out.append(Dispatch(msg=msg))
    return out
