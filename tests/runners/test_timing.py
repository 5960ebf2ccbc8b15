"""Why a run took long: a hang, an endless loop, or a machine that gave it no CPU.

Real pytest in the real sandbox. A run starved by real busy neighbours is
tests/fleet/test_starved.py's (starved, not red, not blamed on the code, and re-run); an
endless loop killed at its CPU limit is tests/runners/test_hangs.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.core.models import Failure, RunResult
from devloop.runners import PytestRunner, VitestRunner
from devloop.runners.timing import is_timeout, load_note, starved_timeouts
from devloop.sandbox import BwrapSandbox, Limits, Observation
from devloop.sandbox.base import MiB
from devloop.sandbox.cgroups import where_caps_hold
from devloop.sandbox.process import STARVED_FACTOR

MakeView = Callable[[str], Path]
UNIT = "todo-py"
SLACK_S = 30.0


SPIN_1S = (
    "    import time\n    end = time.thread_time() + 1\n"
    "    while time.thread_time() < end:\n        pass"
)


def suite(view: Path, body: str) -> None:
    (view / f"units/{UNIT}/tests/test_todo.py").write_text(f"def test_it():\n{body}\n")


def run(runner: PytestRunner, view: Path, timeout_s: float) -> tuple[RunResult, float]:
    started = time.monotonic()
    out = runner.run(
        view=view, unit_id=UNIT, run_id="run-1", attempt=1, retry_budget_left=3,
        timeout_s=timeout_s,
    )  # fmt: skip
    written = view / f"units/{UNIT}/runs/run-1/result.json"
    assert RunResult.model_validate_json(written.read_text()) == out.result
    return out.result, time.monotonic() - started


@pytest.mark.alone  # "a free machine" is the whole machine
def test_the_spinning_suite_passes_in_its_limit_on_a_free_machine(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    suite(view, SPIN_1S)
    result, _ = run(PytestRunner(sandbox, python_toolchain_dir), view, 3)
    assert result.ok and not result.starved
    assert result.cpu_s is not None and result.cpu_s >= 1.0


# A sleeping test is runnable only while its run starts: other tests' load may delay that
# start (time waiting for a CPU is not counted, up to 3 x the limit), not the kill.
def test_a_sleeping_test_is_killed_at_its_limit_and_called_a_hang(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    suite(view, "    import time\n    time.sleep(600)")
    result, took = run(PytestRunner(sandbox, python_toolchain_dir), view, 3)
    assert took < 3 * STARVED_FACTOR + SLACK_S
    assert result.crashed and not result.starved and result.next_action == "retry_tester"
    assert result.crash_reason is not None
    assert result.crash_reason.startswith("pytest passed the 3 s limit and was killed")
    assert "almost no CPU" in result.crash_reason
    assert result.wall_s is not None and result.wall_s >= 3
    assert result.cpu_s is not None and result.cpu_s < 1.5


@pytest.mark.skipif(not where_caps_hold().memory, reason="no memory cgroup here (not root)")
def test_a_test_holding_more_memory_than_the_sandbox_allows_is_killed_and_called_so(
    settings: Settings, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    small = PytestRunner(BwrapSandbox(settings, Limits(memory_bytes=256 * MiB)),
                         python_toolchain_dir)
    view = make_view("python/todo-py")
    # 512 MiB in one process is within RLIMIT_DATA (4 GiB): only the command's cap holds it.
    suite(view, "    import time\n    held = bytearray(512 * 2**20)\n    time.sleep(60)")
    result, took = run(small, view, 20)
    assert took < 20 + SLACK_S
    assert result.crashed and not result.starved
    assert result.crash_reason is not None
    assert result.crash_reason.startswith("pytest was killed at the sandbox's memory limit")
    assert "the test running was tests/test_todo.py::test_it" in result.crash_reason


def obs(wall_s: float, wait_s: float) -> Observation:
    return Observation(
        exit_code=1, stdout="", stderr="", duration_ms=int(wall_s * 1000), wait_s=wait_s
    )


TIMED_OUT = Failure(test="t", stack="Error: Test timed out in 5000ms.")
ASSERTED = Failure(test="u", stack="AssertionError: expected 500 to be 400")


def test_tests_that_time_out_while_the_run_waits_for_a_cpu_are_starved() -> None:
    assert starved_timeouts(obs(20, 12), [TIMED_OUT]) is not None
    assert starved_timeouts(obs(20, 1), [TIMED_OUT]) is None  # a real slow test
    assert starved_timeouts(obs(20, 12), [TIMED_OUT, ASSERTED]) is None  # a real failure too
    assert starved_timeouts(obs(20, 12), []) is None


def test_vitest3s_own_timeout_output_is_a_timeout_and_can_be_starved(
    sandbox: BwrapSandbox, node_toolchain_dir: Path, make_view: MakeView
) -> None:
    # Not a hand-written stack: the failure a real vitest 3 run gives a test past its own
    # 200 ms limit (its JSON report says only "Error: STACK_TRACE_ERROR").
    view = make_view("node/todo-be")
    (view / "units/todo-be/tests/todo-be.spec.js").write_text(
        "import { it } from 'vitest';\n"
        "it('waits forever', async () => { await new Promise(() => {}); }, 200);\n"
        "it('fails', () => { throw new Error('no'); });\n"  # so that a busy machine cannot
    )  # make the run starved (and its failures not reported)
    vitest = VitestRunner(sandbox, node_toolchain_dir / "node_modules")
    out = vitest.run(view=view, unit_id="todo-be", run_id="run-1", attempt=1, retry_budget_left=3)
    [timed_out, failed] = out.result.failures
    assert not is_timeout(failed)
    assert is_timeout(timed_out) and "200ms" in timed_out.stack
    assert starved_timeouts(obs(20, 12), [timed_out]) is not None
    assert starved_timeouts(obs(20, 1), [timed_out]) is None  # a real slow test


def test_the_load_note_says_starved_busy_or_nothing() -> None:
    def result(**fields: object) -> RunResult:
        return RunResult(run_id="r", unit_id="u", attempt=1, ok=False).model_copy(update=fields)

    assert load_note(result(starved=True)).startswith("starved: ")
    busy = load_note(result(wall_s=20.0, wait_s=12.0))
    assert busy == "busy machine: the last test run waited 12 s of 20 s for a CPU"
    assert load_note(result(wall_s=20.0, wait_s=1.0)) == ""
