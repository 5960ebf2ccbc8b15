"""Host-wide slots for test runs: no more runs at once than the machine has CPUs.

Every worker process on a host takes a slot (an flock on one of N files under the cache
dir) for each test run, so a server with four worker slots and two cores runs two test
runs and queues the rest, instead of starting four that starve each other into their
time limits. A process that dies releases its slot with its file descriptors.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from devloop.sandbox.base import ensure_public_dir


def cpu_count() -> int:
    """The CPUs this process may run on: its affinity, capped by a cgroup CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = _quota()
    return max(1, min(cpus, int(quota))) if quota else cpus


def _quota() -> float | None:
    """CPUs a cgroup quota allows (v2 cpu.max, v1 cfs quota/period), None when unlimited."""
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    with contextlib.suppress(OSError, ValueError):
        v1 = Path("/sys/fs/cgroup/cpu")
        quota = (v1 / "cpu.cfs_quota_us").read_text().strip()
        period = (v1 / "cpu.cfs_period_us").read_text().strip()
        return None if int(quota) <= 0 else int(quota) / int(period)
    return None


@contextlib.contextmanager
def run_slot(cache_dir: Path, count: int = 0, max_wait_s: float | None = None) -> Iterator[float]:
    """Hold one of `count` (0: one per CPU) host-wide slots; yields the seconds waited.

    Past `max_wait_s` (None: no limit) the run goes ahead without a slot rather than
    never running.
    """
    count = count or cpu_count()
    directory = ensure_public_dir(cache_dir / "slots", 0o1777)
    started = time.monotonic()
    delay = 0.02
    while True:
        for index in range(count):
            fd = _open(directory / f"test-{index}")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield time.monotonic() - started
            finally:
                os.close(fd)  # releases the lock
            return
        if max_wait_s is not None and time.monotonic() - started >= max_wait_s:
            yield time.monotonic() - started
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _open(path: Path) -> int:
    """The slot file, created world-writable so workers of other users share it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except PermissionError:  # another user's file: flock works on a read-only fd too
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o666)
    return fd
