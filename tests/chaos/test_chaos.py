"""The chaos suite, small: a layered project through `devloop run` with 3 workers while
workers are SIGKILLed, the embedded Redis is SIGKILLed, a worker is paused past its lease,
and the run itself gets SIGTERM and is started again. Every invariant must hold after.
(bench/chaos.py is the soak: a bigger project, more kills, and the makespan against a run
without faults.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import Chaos, ChaosPlan, chaos_project, invariants, report
from tests.leftovers import views_of_killed_processes

SMALL = ChaosPlan(layers=3, width=5, worker_kills=3, latency_ms=3000)


@pytest.mark.timeout(900)
def test_a_run_survives_killed_workers_a_killed_redis_a_paused_worker_and_a_restart(
    tmp_path: Path,
) -> None:
    project = chaos_project(tmp_path / "p", SMALL)
    with views_of_killed_processes():
        result = Chaos(project, SMALL).go()
    checks = invariants(project, result.pids)
    text = report(result, checks)
    print(text)
    assert result.exits[-1] == 0, text
    assert 143 in result.exits, text  # the SIGTERM stopped it cleanly
    kinds = [f.kind for f in result.faults]  # each planned fault happened mid-run
    assert sorted(kinds) == sorted(["pause", "redis", "sigterm"] + ["worker"] * 3), text
    assert all(f.recovered_s is not None for f in result.faults), text
    assert not [name for name, problems in checks.items() if problems], text
