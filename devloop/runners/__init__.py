"""Test runners: run a unit's tests in the sandbox and write runs/{run}/result.json.

    TestRunner (protocol)   run(view=, unit_id=, run_id=, attempt=, retry_budget_left=, timeout_s=)
    +-- VitestRunner        node units (vitest 3; a reporter streams the verdict)
    +-- PytestRunner        python units (pytest; a plugin streams the verdict)

The verdict comes over a pipe as tests finish (`channel`), and stands only when it agrees
with the exit status, the collected count and the report file (`verdict`); `timing` says
whether a slow run was a hang, an endless loop or a machine too busy to judge it.

`build_hint` turns one failure into the sentence the coder acts on; `is_useful_hint` is the
tester's self-check on it.
"""

from __future__ import annotations

from devloop.runners.base import TIMEOUT_S, RunOutcome, TestRunner
from devloop.runners.hints import build_hint, is_useful_hint
from devloop.runners.pytest import PytestRunner
from devloop.runners.vitest import VitestRunner

__all__ = [
    "TIMEOUT_S",
    "PytestRunner",
    "RunOutcome",
    "TestRunner",
    "VitestRunner",
    "build_hint",
    "is_useful_hint",
]
