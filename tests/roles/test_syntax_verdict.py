"""The coder's syntax check: a real failure is handed back, a check killed from outside
(a worker shutting down) is no verdict on the code and is not. No servers."""

from __future__ import annotations

import pytest

from devloop.core.errors import CheckInterrupted
from devloop.roles.checks import syntax_problems
from devloop.sandbox import Observation


def observed(exit_code: int, timed_out: bool = False) -> Observation:
    return Observation(exit_code=exit_code, stdout="", stderr="SyntaxError: invalid syntax",
                       duration_ms=5, timed_out=timed_out)


def test_a_syntax_error_is_handed_back_and_a_clean_check_passes() -> None:
    assert syntax_problems(observed(0)) == []
    assert syntax_problems(observed(1)) == ["syntax check failed: SyntaxError: invalid syntax"]


def test_a_check_killed_by_a_signal_raises_so_the_step_runs_again_instead_of_a_handback() -> None:
    """Handing "killed" back made a resumed session act on a failure the code never had
    (the chaos suite's SIGTERM landed in a coder's self-check)."""
    with pytest.raises(CheckInterrupted, match="killed by signal 15"):
        syntax_problems(observed(143))
    # At its own time limit the check did run, and too long is the code's to answer for.
    assert syntax_problems(observed(137, timed_out=True))[0].startswith("syntax check failed")
