"""How a paused run ends (devloop/cli/run/people.py): the exit codes' precedence
docs/running.md states, decided from the final status alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from devloop.cli.run.people import EXIT_CANCELLED, EXIT_PAUSED, paused_exit
from devloop.fleet.status import ProjectStatus, UnitRow


def _final(paused: str | None, *statuses: str) -> ProjectStatus:
    rows = [UnitRow(unit_id=f"u{i}", status=s, attempt=1, tokens=0, cost_usd=0.0,
                    elapsed_s=0.0) for i, s in enumerate(statuses)]
    return ProjectStatus(pid="p-fleet", units=rows, paused=paused, spent_usd=0.01)


@pytest.mark.parametrize(("final", "code"), [
    (_final("cancelled", "blocked", "blocked_upstream"), EXIT_CANCELLED),  # every unit done
    (_final("cancelled", "passed", "blocked"), EXIT_CANCELLED),
    (_final("cancelled", "blocked", "paused"), EXIT_CANCELLED),
    (_final("budget", "passed", "blocked"), EXIT_PAUSED),
    (_final("cancelled", "passed", "passed"), None),  # every unit passed: 0, not cancelled
    (_final(None, "passed", "blocked"), None),  # blocked, no pause: 1
], ids=["cancel-all-blocked", "cancel-some-blocked", "cancel-mid-flight", "budget-blocked",
        "cancel-all-passed", "no-pause"])
def test_a_pause_outranks_a_blocked_unit_and_yields_to_all_passed(
    final: ProjectStatus, code: int | None
) -> None:
    said = Console(record=True, width=200)
    assert paused_exit(final, Path("my-project"), said) == code
    if code is not None:
        assert "`devloop resume my-project" in said.export_text()
