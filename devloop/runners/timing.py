"""Why a run took long: a hang, an endless loop, or a machine that gave it no CPU.

The sandbox measures each run's wall time, the CPU its processes used and the time they
were runnable but got no CPU (`Observation.cpu_s`, `wait_s`), and kills a run at its
limit of given time (wall time less that wait), at its CPU limit, or, when starved, at
a multiple of its limit in wall time. From those numbers:

- killed while starved, or red only because tests hit their own timeouts while the run
  spent a large share of its time waiting for a CPU: **starved**, an infrastructure
  result (re-run later), never blamed on the code;
- killed busy (CPU most of the time it was given): an endless loop, never starved, however
  busy the machine was (a run that burned its CPU limit got its CPU);
- killed idle (little CPU, little wait): a hang (a sleep, a promise never resolved).

A killed run names the test it was in, from the live stream (the channel's `start`
records: the test that started and had not finished, the longest-running one when
several had), and quotes only the output written since that test started. pytest dumps
the stacks of a test that runs past half the limit (`faulthandler_timeout`): when its
innermost frame in the unit is in code/, the hang is the code's (`LOOP_IN_CODE`, for the
coder); otherwise (a loop in tests/, or no frame, as with vitest) it is the tester's.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from devloop.core.models import Failure, RunResult
from devloop.runners.channel import Mark, Records
from devloop.runners.tamper import LOOP_IN_CODE
from devloop.sandbox import Observation

# A run whose wait for a CPU is at least this share of its wall time was starved.
STARVED_SHARE = 0.25
# A run killed at its limit that used at least this share of its given time on a CPU
# was busy (a loop), not waiting on something that never came (a hang).
BUSY_SHARE = 0.5
# A frame of faulthandler's dump: `  File "/project/units/u/code/a.py", line 3 in spin`.
_DUMP_FRAME = re.compile(r'^\s*File "[^"]*?/((?:code|tests)/[^"]+)", line (\d+) in (\S+)', re.M)
_DUMP_HEAD = re.compile(r"^Timeout \([\d:.]+\)!$", re.M)
# What vitest's workers write as a test starts and ends (devloop-setup.mjs).
_MARKED = re.compile(r"^devloop-test-(started|ended): (.+)\n?", re.M)
# vitest's console output of one test: `stderr | tests/a.test.js > suite > name` and lines.
_CONSOLE_BLOCK = re.compile(r"^(?:stdout|stderr) \| (\S+) > (.+)\n(?:.+\n?)*", re.M)
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


@dataclass(frozen=True)
class Running:
    """The test a killed run was in, and how many bytes of stdout and stderr the run had
    written when it started."""

    name: str
    stdout_at: int = 0
    stderr_at: int = 0


def running_test(stream: Records, stderr: str, relative: Callable[[str], str]) -> Running | None:
    """The test that started and had not finished (the longest-running one), from the
    channel's `start` records (pytest) or the start and end lines on stderr (vitest's
    workers write them at once; its reporter hears of a test only once the worker is
    free again), or None."""
    running: dict[str, Running] = {}
    for i, rec in enumerate(stream.records):
        kind, key = rec.get("e"), str(rec.get("id"))
        if kind == "start":
            mark = stream.marks[i] if i < len(stream.marks) else Mark()
            running.setdefault(key, Running(key, mark.stdout, mark.stderr))
        elif kind == "phase" and rec.get("when") == "teardown":
            running.pop(key, None)
    for m in _MARKED.finditer(stderr):
        name = relative(m.group(2))
        if m.group(1) == "started":
            # Where vitest's stdout stood is not known: none of it is quoted.
            at = len(stderr[: m.end()].encode())
            running.setdefault(name, Running(name, sys.maxsize, at))
        else:
            running.pop(name, None)
    return next(iter(running.values()), None)


def since(text: str, offset: int) -> str:
    """What a stream wrote after its first `offset` bytes."""
    return text.encode("utf-8", "replace")[offset:].decode("utf-8", "replace")


def unmarked(text: str) -> str:
    """Output without the lines vitest's workers write as each test starts and ends."""
    return _MARKED.sub("", text)


def own_output(text: str, running: Running | None) -> str:
    """A killed run's output without the markers, the stack dumps and what vitest printed
    for other tests (`stderr | tests/a.test.js > early` blocks)."""
    text = _MARKED.sub("", text)
    found = _DUMP_HEAD.search(text)
    text = text[: found.start()] if found else text

    def keep(block: re.Match[str]) -> str:
        file, names = block.group(1), block.group(2).split(" > ")
        return block.group(0) if running and running.name == f"{file}::{' '.join(names)}" else ""

    return _CONSOLE_BLOCK.sub(keep, text)


def loop_frame(stderr: str) -> str | None:
    """`code/a.py:3 in spin`: the innermost unit frame of faulthandler's last dump."""
    heads = list(_DUMP_HEAD.finditer(stderr))
    if not heads:
        return None
    found = _DUMP_FRAME.search(stderr, heads[-1].end())  # most recent call first
    return f"{found.group(1)}:{found.group(2)} in {found.group(3)}" if found else None


def killed_reason(
    obs: Observation, tool: str, limit_s: float, last: str, running: Running | None = None
) -> tuple[str, bool]:
    """(crash or starved reason, starved?) for a run the sandbox killed at a limit."""
    use = usage_line(obs)
    if obs.limit == "memory":
        tail = f"; the test running was {running.name}" if running is not None else ""
        tail += f"; last output: {last}" if last else ""
        return (
            f"{tool} was killed at the sandbox's memory limit (all its processes and /tmp "
            f"together; DEVLOOP_SANDBOX_MEMORY_MB): a test or the code held more memory than "
            f"that (a leak, a huge fixture, runaway recursion or caching; {use}){tail}",
            False,
        )
    busy = obs.limit == "cpu" or obs.cpu_s >= BUSY_SHARE * given_s(obs)
    # A run that was on a CPU most of its wall time was given it: never starved.
    burned = obs.cpu_s >= BUSY_SHARE * obs.duration_ms / 1000
    if obs.limit == "starved" and not burned:
        return (
            f"the machine was too busy to run the tests: {tool} got {given_s(obs):.1f} s of "
            f"its {limit_s:g} s limit in {obs.duration_ms / 1000:.0f} s ({use}); not the "
            "code's fault, the run is repeated later",
            True,
        )
    where = loop_frame(obs.stderr)
    head = f"{LOOP_IN_CODE}: " if where and where.startswith("code/") else ""
    tail = f"; last output: {last}" if last else ""
    if running is not None:
        tail = f"; the test running was {running.name}" + (f", at {where}" if where else "") + tail
    if busy:
        kind = "CPU limit" if obs.limit == "cpu" else "limit"
        return (
            f"{head}{tool} was killed at its {limit_s:g} s {kind}: a test kept the CPU busy "
            f"without finishing (an endless loop or runaway recursion; {use}){tail}",
            False,
        )
    return (
        f"{head}{tool} passed the {limit_s:g} s limit and was killed: a test never finished "
        f"while using almost no CPU (an unresolved promise, a server or handle left open, a "
        f"wait on something that never comes; {use}){tail}",
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
