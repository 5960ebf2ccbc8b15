"""A unit's final status from what the folder shows. Pure.

The loop's own word wins: the last `loop_*` timeline event of a unit (written by the loop,
`agent: "loop"`; no session can write one) says passed (`loop_pass`), blocked
(`loop_block`) or still moving (released, a retry or a resume). Without loop events (a
folder written by another tool), the latest run's result.json decides. A unit that did not pass
and sits downstream of a blocked unit is `blocked_upstream`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from devloop.core import dag

STATUSES = ("passed", "blocked", "blocked_upstream", "failed", "in_progress", "pending")
MOVING = frozenset({"loop_release", "loop_retry_coder", "loop_retry_tester", "loop_resume"})

# (loop event kinds in order, latest run ok or None if no run, any coder/step activity)
UnitFacts = tuple[Sequence[str], bool | None, bool]


def unit_status(loop_kinds: Sequence[str], latest_ok: bool | None, active: bool) -> str:
    """The status of one unit on its own, before upstream blocks are applied."""
    last = loop_kinds[-1] if loop_kinds else None
    if last == "loop_block":
        return "blocked"
    if last == "loop_pass" or (last is None and latest_ok):
        return "passed"
    if last in MOVING:
        return "in_progress"
    if latest_ok is False:
        return "failed"
    return "in_progress" if active else "pending"


def derive_statuses(graph: dag.Graph, facts: Mapping[str, UnitFacts]) -> dict[str, str]:
    """Every unit's final status, blocked_upstream included."""
    own = {unit: unit_status(*facts.get(unit, ((), None, False))) for unit in graph}
    blocked = [unit for unit, status in own.items() if status == "blocked"]
    behind = dag.downstream_of(graph, blocked)
    return {unit: "blocked_upstream" if unit in behind and status not in ("passed", "blocked")
            else status for unit, status in own.items()}
