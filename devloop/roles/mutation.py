"""A unit's mutation score: how many small changes of code/ its tests notice.

A bounded, evenly spaced sample of the mutants of code/**/*.py (runners/mutants_py.py)
is run one at a time in one scratch copy of the unit; a mutant is killed when the run
is red or crashed. Measured, not a gate: it costs one test run per mutant.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from devloop.core.config import Settings
from devloop.core.models import MUTATION_FILE
from devloop.runners import mutants_py
from devloop.runners.base import TIMEOUT_S, TestRunner
from devloop.runners.hollow import code_sources, copy_unit
from devloop.safe.safedir import Dir
from devloop.sandbox.viewdir import make_view, remove_view


@dataclass
class MutationScore:
    """Mutants run, killed, and the ones that survived (`code/x.py:12 Add -> Sub`)."""

    sites: int = 0
    run: int = 0
    killed: int = 0
    survived: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    reason: str | None = None  # why nothing was run


    @property
    def score(self) -> float | None:
        """The share of the mutants run that the tests killed."""
        return round(self.killed / self.run, 3) if self.run else None


def sample(sites: int, n: int) -> list[int]:
    """At most n indices spread evenly over range(sites), the same every time."""
    if sites <= n:
        return list(range(sites))
    return sorted({round(i * (sites - 1) / (n - 1)) for i in range(n)}) if n > 1 else [0]


def mutation_score(
    runner: TestRunner,
    settings: Settings,
    view: Path,
    unit_id: str,
    n: int = 8,
    timeout_s: float = TIMEOUT_S,
) -> MutationScore:
    """Run a sample of n mutants of the unit's python code against its tests."""
    started = time.monotonic()
    out = MutationScore()
    unit = f"units/{unit_id}"
    with Dir.open(view) as root:
        files = {rel: root.read_text(f"{unit}/{rel}") for rel in
                 code_sources(view, unit_id, (".py",))}
    sites = [(rel, i) for rel, text in files.items() for i in range(mutants_py.count(text))]
    out.sites = len(sites)
    scratch = make_view(settings, prefix=f"mutants-{unit_id}-")
    try:
        copy_unit(view, scratch, unit_id)
        base = runner.run(view=scratch, unit_id=unit_id, run_id="mutant-base", attempt=0,
                          retry_budget_left=0, timeout_s=timeout_s).result
        if not base.ok:
            # A red suite kills every mutant: that would measure nothing.
            out.reason = "the tests are not green on the code itself"
            return out
        with Dir.open(scratch) as copy:
            for k in sample(len(sites), n):
                rel, i = sites[k]
                m = mutants_py.mutant(files[rel], i)
                copy.write_atomic(f"{unit}/{rel}", m.source, 0o644, replace=True)
                result = runner.run(
                    view=scratch, unit_id=unit_id, run_id=f"mutant-{k}", attempt=0,
                    retry_budget_left=0, timeout_s=timeout_s, derived=True,
                ).result
                copy.write_atomic(f"{unit}/{rel}", files[rel], 0o644, replace=True)
                out.run += 1
                if result.ok:
                    out.survived.append(f"{rel}:{m.line} {m.change}")
                else:
                    out.killed += 1
    finally:
        remove_view(scratch)
    out.wall_s = round(time.monotonic() - started, 3)
    return out


def to_json(score: MutationScore) -> dict[str, object]:
    """A unit's entry of agent-state/mutation.json."""
    return {
        "score": score.score,
        "killed": score.killed,
        "run": score.run,
        "sites": score.sites,
        "survived": score.survived,
        "wall_s": score.wall_s,
        "reason": score.reason,
    }


def measure_folder(
    project: Path,
    unit_ids: list[str],
    runner_for: Callable[[str], AbstractContextManager[TestRunner]],
    settings: Settings,
    n: int = 8,
) -> dict[str, MutationScore]:
    """The mutation score of each named unit of a project folder (its code and tests as
    they are there), written to agent-state/mutation.json beside earlier ones.
    `runner_for(unit)` gives the runner for one unit (with its dependencies' code)."""
    scores: dict[str, MutationScore] = {}
    for unit_id in unit_ids:
        view = make_view(settings, prefix=f"mutants-src-{unit_id}-")
        try:
            copy_unit(project, view, unit_id)
            with runner_for(unit_id) as runner:
                scores[unit_id] = mutation_score(runner, settings, view, unit_id, n=n)
        finally:
            remove_view(view)
    with Dir.open(project) as root:
        try:
            saved = json.loads(root.read_text(MUTATION_FILE))
        except (OSError, ValueError):
            saved = {}
        saved = saved if isinstance(saved, dict) else {}
        saved.update({u: to_json(s) for u, s in scores.items()})
        root.write_atomic(MUTATION_FILE, json.dumps(saved, indent=2) + "\n", 0o644, replace=True)
    return scores
