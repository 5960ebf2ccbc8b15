"""Slots for test runs: no more runs at once than the machine has CPUs.

Every worker process of a user takes a slot (an flock on one of N files under the user's
cache dir) for each test run, so a server with four worker slots and two cores runs two
test runs and queues the rest, instead of starting four that starve each other into
their time limits. A process that dies releases its slot with its file descriptors.

The slots are the user's own (a 0700 dir, 0600 files): another local user who could open
them could hold every flock and make every run wait. An entry planted in a slot's place
(a directory, a fifo, a link) is passed over, never followed, and fails no run.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from devloop.safe.private import NotPrivate, make_private_dir

log = logging.getLogger(__name__)


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
    """Hold one of `count` (0: one per CPU) slots of this user's; yields the seconds waited.

    Past `max_wait_s` (None: no limit), or when no slot file is usable, the run goes
    ahead without a slot rather than never running.
    """
    count = count or cpu_count()
    started = time.monotonic()
    try:
        directory = make_private_dir(cache_dir / "slots")
    except NotPrivate as exc:
        log.warning("test runs go ahead without a slot: %s", exc)
        yield 0.0
        return
    delay = 0.02
    while True:
        usable = 0
        for index in range(count):
            fd = _open(directory / f"test-{index}")
            if fd is None:
                continue
            usable += 1
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
        if not usable or (max_wait_s is not None and time.monotonic() - started >= max_wait_s):
            yield time.monotonic() - started
            return
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _open(path: Path) -> int | None:
    """The slot file, this user's only; None for anything else planted in its place."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # a link (ELOOP), a directory (EISDIR), another user's file
        _passed_over(path, exc.strerror or str(exc))
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)  # a fifo or socket someone made there
        _passed_over(path, "not a file of this user's")
        return None
    return fd


def _passed_over(path: Path, why: str) -> None:
    """Say once per process that a planted slot is not used."""
    if str(path) not in _warned:
        _warned.add(str(path))
        log.warning("slot %s passed over: %s; remove it", path, why)


_warned: set[str] = set()
