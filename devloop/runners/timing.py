"""Why a run took long: a hang, an endless loop, or a machine that gave it no CPU.

The sandbox measures each run's wall time, the CPU its processes used and the time they
were runnable but got no CPU (`Observation.cpu_s`, `wait_s`), and kills a run at its
limit of given time (wall time less that wait), at its CPU limit, or, when starved, at
a multiple of its limit in wall time. From those numbers:

- killed while starved, or red only because tests hit their own timeouts while the run
  spent a large share of its time waiting for a CPU: **starved**, an infrastructure
  result (re-run later), never blamed on the code;
- killed busy (CPU most of the time it was given): an endless loop;
- killed idle (little CPU, little wait): a hang (a sleep, a promise never resolved).
"""

from __future__ import annotations

import re

from devloop.models import Failure, RunResult
from devloop.sandbox import Observation

# A run whose wait for a CPU is at least this share of its wall time was starved.
STARVED_SHARE = 0.25
# A run killed at its limit that used at least this share of its given time on a CPU
# was busy (a loop), not waiting on something that never came (a hang).
BUSY_SHARE = 0.5
_TEST_TIMEOUT = re.compile(r"(?:Test|Hook) timed out in \d+ ?ms|\bTimeout\b.*exceeded", re.I)


def given_s(obs: Observation) -> float:
    """Wall time less the time the run waited for a CPU."""
    return max(obs.duration_ms / 1000 - obs.wait_s, 0.0)


def wait_share(obs: Observation) -> float:
    """The share of the run's wall time spent waiting for a CPU."""
    wall = obs.duration_ms / 1000
    return obs.wait_s / wall if wall > 0 else 0.0


def usage_line(obs: Observation) -> str:
    """`12.0 s wall, 0.4 s CPU, 9.5 s waiting for a CPU`."""
    return (
        f"{obs.duration_ms / 1000:.1f} s wall, {obs.cpu_s:.1f} s CPU, "
        f"{obs.wait_s:.1f} s waiting for a CPU"
    )


def killed_reason(obs: Observation, tool: str, limit_s: float, last: str) -> tuple[str, bool]:
    """(crash or starved reason, starved?) for a run the sandbox killed at a limit."""
    use = usage_line(obs)
    tail = f"; last output: {last}" if last else ""
    if obs.limit == "starved":
        return (
            f"the machine was too busy to run the tests: {tool} got {given_s(obs):.1f} s of "
            f"its {limit_s:g} s limit in {obs.duration_ms / 1000:.0f} s ({use}); not the "
            "code's fault, the run is repeated later",
            True,
        )
    if obs.limit == "cpu" or obs.cpu_s >= BUSY_SHARE * given_s(obs):
        return (
            f"{tool} was killed at its {limit_s:g} s CPU limit: a test kept the CPU busy "
            f"without finishing (an endless loop or runaway recursion; {use}){tail}",
            False,
        )
    return (
        f"{tool} passed the {limit_s:g} s limit and was killed: a test never finished while "
        f"using almost no CPU (an unresolved promise, a server or handle left open, a wait "
        f"on something that never comes; {use}){tail}",
        False,
    )


def load_note(result: RunResult) -> str:
    """What a run says about the machine's load, for the people watching ("" when idle)."""
    if result.starved:
        return "starved: the machine gives the test runs too little CPU; re-running later"
    wall, wait = result.wall_s or 0.0, result.wait_s or 0.0
    if wall > 0 and wait / wall >= STARVED_SHARE:
        return f"busy machine: the last test run waited {wait:.0f} s of {wall:.0f} s for a CPU"
    return ""


def is_timeout(failure: Failure) -> bool:
    """Whether a test failed on its own time limit (not on an assertion)."""
    return bool(_TEST_TIMEOUT.search(failure.stack))


def starved_timeouts(obs: Observation, failures: list[Failure]) -> str | None:
    """The reason a red run is starved: every failure a timeout, in a run that waited long."""
    if not failures or not all(is_timeout(f) for f in failures):
        return None
    if wait_share(obs) < STARVED_SHARE:
        return None
    return (
        f"{len(failures)} test(s) hit their own time limit while the run spent "
        f"{wait_share(obs):.0%} of its time waiting for a CPU ({usage_line(obs)}): the "
        "machine was too busy, not the code too slow; the run is repeated later"
    )
