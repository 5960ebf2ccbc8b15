"""The hollow run: a green run's tests once more, against a hollow build of code/.

The build is a scratch view of its own (a copy of the unit but runs/, code/ hollowed by
the stack's runner), run like the real run and then removed: nothing of it is committed,
and no bug is opened for what fails there (failing is what a good test does there).
"""

from __future__ import annotations

import time
from pathlib import Path

from devloop.core.config import Settings
from devloop.core.models import Adequacy
from devloop.roles import adequacy, checks
from devloop.roles import coverage as cov
from devloop.roles.adequacy import Claims
from devloop.runners.base import TIMEOUT_S, RunOutcome, TestRunner
from devloop.runners.hollow import copy_unit
from devloop.safe.safetree import TooMany
from devloop.sandbox.viewdir import make_view, remove_view


def hollow_check(
    runner: TestRunner,
    settings: Settings,
    view: Path,
    real: RunOutcome,
    claims: Claims,
    timeout_s: float = TIMEOUT_S,
) -> Adequacy | None:
    """How far a green run's tests prove the claims (None: the run was not green)."""
    result = real.result
    if not result.ok:
        return None
    started = time.monotonic()
    root = make_view(settings, prefix=f"hollow-{result.unit_id}-")
    try:
        try:
            copy_unit(view, root, result.unit_id)
        except (TooMany, OSError) as exc:
            # What the tests left in the unit cannot be copied: theirs to mend.
            return Adequacy(measured=False, tests_fault=True,
                            reason=f"the unit could not be copied for a hollow build: {exc}")
        why = runner.hollow_code(root, result.unit_id)
        if why is not None:  # our parser's limit, not the tests': the unit is not held
            return Adequacy(measured=False, reason=f"no hollow build of code/: {why}")
        hollow = runner.run(
            view=root,
            unit_id=result.unit_id,
            run_id=f"{result.run_id}-hollow",
            attempt=result.attempt,
            retry_budget_left=result.retry_budget_left,
            timeout_s=timeout_s,
            derived=True,
        )
    finally:
        remove_view(root)
    wall = round(time.monotonic() - started, 3)
    if hollow.result.starved:  # a busy machine says nothing about the tests
        why = hollow.result.starved_reason or "?"
        return Adequacy(measured=False, reason=f"the hollow run was starved: {why[:300]}",
                        hollow_wall_s=wall)
    if hollow.result.crashed:
        # Tests that crash rather than fail on hollow code would slip past the check.
        why = hollow.result.crash_reason or "?"
        return Adequacy(measured=False, tests_fault=True, hollow_wall_s=wall,
                        reason=f"the tests crashed on the hollow build: {why[:300]}")
    tests = cov.blocks(checks.test_sources(view / f"units/{result.unit_id}"), claims.stack)
    judged = adequacy.judge(
        tests,
        claims.stack,
        real.passed_tests,
        hollow.passed_tests,
        hollow.failed_tests,
        claims.criteria,
        claims.status_codes,
    )
    return judged.model_copy(update={"hollow_wall_s": wall})
