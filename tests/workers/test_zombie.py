"""A worker paused past its lease (SIGSTOP) while another takes its step over, then woken
(SIGCONT), writes nothing more: no checkpoint, no ledger line, no commit, no release."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devloop.ledgers import FileSink, Timeline, parse_coder_log
from devloop.server.embedded import running_server
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.leftovers import views_of_killed_processes
from tests.proctree import alive
from tests.workers.runproc import RunProcess, clean_env

pytestmark = pytest.mark.timeout(600)
PID = "p-fleet"
# Short leases and a short grace so the take-over comes in seconds, not minutes.
FAST = {"DEVLOOP_LEASE_TTL_S": "3", "DEVLOOP_RECONCILE_GRACE_S": "4"}


@pytest.fixture
def zombie_run(tmp_path: Path) -> Iterator[RunProcess]:
    # "after" is slow too, so the run is still up when the paused worker wakes.
    plans = [UnitPlan("slow", coder_latency_ms={2: 6000}),
             UnitPlan("after", ["slow"], coder_latency_ms={1: 8000})]
    root = build(tmp_path / "p", plans)
    turns = script(plans)
    # Turn 2 of the slow coder also says a line of its event: a zombie's duplicate would show.
    turn2 = turns["sessions"]["coder.*.slow"]["turns"][2]
    turn2["content"].append({"tool_use": {"name": "timeline_append", "input": {
        "kind": "unit_coded", "ref": "code/unit.py", "summary": "slow: code/unit.py written"}}})
    (root / "stub.yaml").write_text(yaml.safe_dump(turns))
    run = RunProcess(root, workers=2, env=clean_env(**FAST))
    with views_of_killed_processes():
        yield run
        run.close()


def store_of(run: RunProcess) -> RedisStore:
    endpoint = running_server(run.project / ".devloop")
    assert endpoint is not None, "the run's Redis is not up"
    return RedisStore.from_url(endpoint.url)


def test_a_paused_worker_that_wakes_after_a_take_over_writes_nothing(
    zombie_run: RunProcess,
) -> None:
    run = zombie_run.start()
    run.wait_for("the run's Redis", lambda: running_server(run.project / ".devloop") is not None)
    store = store_of(run)
    try:
        # The slow coder's lease names its pool process: host:pid:task.
        run.wait_for("the slow coder's lease", lambda: store.lease_owner(PID, "slow", 1, "coder"))
        owner = store.lease_owner(PID, "slow", 1, "coder") or ""
        paused = int(owner.split(":")[1])
        time.sleep(1.0)  # inside its 6 s model turn 2
        os.kill(paused, signal.SIGSTOP)
        try:
            # Its lease runs out; the run's reconciler re-sends the unit, the other worker
            # takes the step over, and the unit passes without it.
            run.wait_for("the slow unit passing without the paused worker",
                         lambda: store.get_state(PID, "slow").status == "passed", 240)
            finished = store.load_session(PID, "coder", "slow")
        finally:
            os.kill(paused, signal.SIGCONT)
        time.sleep(3)  # the woken worker gets its model reply and tries to go on
        after_wake = store.load_session(PID, "coder", "slow")
    finally:
        store.close()
    assert run.wait(300) == 0, run.output()
    assert finished is not None and finished["finished"]
    assert after_wake == finished  # its checkpoint save was refused
    timeline = Timeline(FileSink(run.project / "timeline.ndjson"))
    coded = [e.summary for e in timeline.events(unit_id="slow", kind="unit_coded")]
    # One event, the runtime's, from the one commit that landed (the zombie's was refused),
    # with turn 2's two lines on it once each.
    assert coded == ["committed code/unit.py, contract.json: slow: value(); "
                     "slow: code/unit.py written"], coded
    log = (run.project / "units/slow/coder.log").read_text()
    assert [d.attempt for d in parse_coder_log(log)] == [1]
    assert len(timeline.events(unit_id="after", kind="loop_release")) == 1
    assert not alive(paused)  # it ended with the run
