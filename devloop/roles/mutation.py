"""A unit's mutation score: how many small changes of code/ its tests notice.

A bounded, evenly spaced sample of the mutants of code/**/*.py (runners/mutants_py.py)
is run one at a time in one scratch copy of the unit; a mutant is killed when the run
is red or crashed. Measured, not a gate: it costs one test run per mutant.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from devloop.config import Settings
from devloop.runners import mutants_py
from devloop.runners.base import TIMEOUT_S, TestRunner
from devloop.runners.hollow import code_sources, copy_unit
from devloop.safedir import Dir
from devloop.views import make_view, remove_view


@dataclass
class MutationScore:
    """Mutants run, killed, and the ones that survived (`code/x.py:12 Add -> Sub`)."""

    sites: int = 0
    run: int = 0
    killed: int = 0
    survived: list[str] = field(default_factory=list)
    wall_s: float = 0.0

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
        with Dir.open(scratch) as copy:
            for k in sample(len(sites), n):
                rel, i = sites[k]
                m = mutants_py.mutant(files[rel], i)
                copy.write_atomic(f"{unit}/{rel}", m.source, 0o644, replace=True)
                result = runner.run(
                    view=scratch, unit_id=unit_id, run_id=f"mutant-{k}", attempt=0,
                    retry_budget_left=0, timeout_s=timeout_s,
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
