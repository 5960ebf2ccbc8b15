"""How much CPU a sandboxed command used, and how long it waited for one.

    Meter (protocol)   join() in the child, before exec; usage() while it runs; close()
    +-- CgroupMeter    a cgroup v2 group per command: exact CPU, wait from PSI and samples
    +-- ProcMeter      no cgroup to create (not root): the session's tasks, sampled

"Waiting" means the command had runnable tasks and none of them was on a CPU, so a
command that keeps every core busy with its own processes does not count as waiting.
It is estimated from each task's run delay (/proc/<pid>/task/<tid>/schedstat), sampled
every 0.2 s; the /proc fallback also sums CPU from the samples (a process that lives
less than a sampling period is missed).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

_FULL = re.compile(r"^full .*\btotal=(\d+)", re.M)
_USAGE = re.compile(r"^usage_usec (\d+)", re.M)
_SAMPLE_S = 0.2
_counter = itertools.count()


@dataclass(frozen=True)
class Usage:
    """CPU seconds used and seconds spent waiting for a CPU, so far."""

    cpu_s: float = 0.0
    wait_s: float = 0.0


class Meter(Protocol):
    """Accounts the CPU and the CPU wait of one command's processes."""

    source: str  # "cgroup" or "proc": how the numbers were measured
    group: Path | None  # the command's own cgroup v2 group, if it has one

    def join(self) -> None:
        """Called in the child before it drops privileges and execs (async-signal-light)."""
        ...

    def start(self, pid: int) -> None:
        """Called in the parent once the child runs."""
        ...

    def usage(self) -> Usage:
        """The usage so far (cheap: a couple of small reads)."""
        ...

    def kill(self) -> None:
        """Kill every process the command started, wherever it moved (best effort)."""
        ...

    def close(self) -> Usage:
        """The final usage; releases what the meter holds."""
        ...


def unified_root() -> Path | None:
    """The cgroup v2 directory this process belongs to, when one is mounted."""
    found = unified()
    return None if found is None else found[1]


def unified() -> tuple[Path, Path] | None:
    """(the cgroup v2 mount point, this process's directory under it), when one is mounted."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text()
        groups = Path("/proc/self/cgroup").read_text()
    except OSError:
        return None
    mount = next(
        (ln.split()[4] for ln in mounts.splitlines() if " - cgroup2 " in ln), None
    )
    own = next((ln[3:] for ln in groups.splitlines() if ln.startswith("0::")), None)
    if mount is None or own is None:
        return None
    # Under a cgroup namespace the path may be shown relative to its root ("/").
    return Path(mount), Path(mount) / own.lstrip("/")


class Sampler:
    """Samples the schedstat (CPU time, run delay) of a command's tasks on a thread.

    Per sampling period, the time no task ran while one waited is estimated as the
    longest single task's wait, at most the period less the CPU all tasks used in it:
    a command whose own processes keep every core busy is not counted as waiting.
    """

    def __init__(self, tasks: Callable[[], Iterable[str]]) -> None:
        self._tasks = tasks  # /proc/<pid>/task/<tid> paths of the command's threads
        self._seen: dict[str, tuple[int, int]] = {}  # task -> (cpu ns, delay ns), last seen
        self.cpu_ns = 0
        self.wait_s = 0.0
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = 0.0

    def start(self) -> None:
        self._last = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1.0)

    def _run(self) -> None:
        while not self._stop.wait(_SAMPLE_S):
            self.sample()

    def sample(self) -> None:
        found: dict[str, tuple[int, int]] = {}
        for task in self._tasks():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(task, "schedstat").read_text().split()
                found[task] = (int(fields[0]), int(fields[1]))
        now = time.monotonic()
        with self.lock:
            ran = longest = 0
            for task, (cpu, delay) in found.items():
                old_cpu, old_delay = self._seen.get(task, (0, 0))
                ran += max(0, cpu - old_cpu)
                longest = max(longest, delay - old_delay)
                self._seen[task] = (cpu, delay)
            self.cpu_ns += ran
            self.wait_s += min(longest / 1e9, max(0.0, now - self._last - ran / 1e9))
            self._last = now


class CgroupMeter:
    """A fresh cgroup v2 group per command; the child moves itself into it before exec.

    CPU comes from the group's cpu.stat (exact, exited processes included). The wait is
    the larger of the group's PSI "full" time and the sampled estimate: PSI weighs each
    CPU's stall by the group's time on that CPU, so a task that moves between CPUs while
    starved reads at about half its real wait.
    """

    source = "cgroup"

    def __init__(self, path: Path) -> None:
        path.mkdir()
        self.path = path
        self.group: Path | None = path
        self._procs = str(path / "cgroup.procs")
        self._sampler = Sampler(self._threads)

    def _threads(self) -> list[str]:
        text = (self.path / "cgroup.threads").read_text()
        return [f"/proc/{tid}/task/{tid}" for tid in text.split()]

    def join(self) -> None:
        # A command that cannot be accounted still runs: it just reads as idle.
        join_group(self._procs)

    def start(self, pid: int) -> None:
        self._sampler.start()

    def usage(self) -> Usage:
        try:
            stat = (self.path / "cpu.stat").read_text()
            pressure = (self.path / "cpu.pressure").read_text()
        except OSError:
            return Usage()
        cpu, full = _USAGE.search(stat), _FULL.search(pressure)
        with self._sampler.lock:
            sampled = self._sampler.wait_s
        return Usage(
            cpu_s=int(cpu.group(1)) / 1e6 if cpu else 0.0,
            wait_s=max(int(full.group(1)) / 1e6 if full else 0.0, sampled),
        )

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")

    def close(self) -> Usage:
        self._sampler.stop()
        final = self.usage()
        self.kill()
        for delay in (0.0, 0.01, 0.05, 0.1, 0.25, 0.5):
            time.sleep(delay)
            try:
                self.path.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:  # EBUSY while the killed processes are being reaped
                continue
        return final


class ProcMeter:
    """No cgroup to create (not root): the tasks of the command's session, sampled."""

    source = "proc"
    group: Path | None = None

    def __init__(self) -> None:
        self._sid = 0
        self._sampler = Sampler(self._tasks)

    def _tasks(self) -> list[str]:
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and _session(entry.name) == self._sid:
                with contextlib.suppress(OSError):
                    found += [t.path for t in os.scandir(f"/proc/{entry.name}/task")]
        return found

    def join(self) -> None:
        return None

    def start(self, pid: int) -> None:
        self._sid = pid
        self._sampler.start()

    def usage(self) -> Usage:
        with self._sampler.lock:
            return Usage(cpu_s=self._sampler.cpu_ns / 1e9, wait_s=self._sampler.wait_s)

    def kill(self) -> None:
        return None

    def close(self) -> Usage:
        self._sampler.stop()
        return self.usage()


def _session(pid: str) -> int:
    """The session id of a process (field 6 of /proc/<pid>/stat), or -1."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[3]) if len(fields) > 3 else -1


def make_meter() -> Meter:
    """A cgroup meter when this process may create groups, else the /proc sampler."""
    root = group_parent()
    if root is not None:
        with contextlib.suppress(OSError):
            return CgroupMeter(root / f"run-{os.getpid()}-{next(_counter)}")
    return ProcMeter()


_parent: list[Path | None] = []


def join_group(procs: str | None) -> None:
    """Move the calling process into the cgroup whose cgroup.procs is `procs` (in the
    child, before it drops root); quietly nothing when it cannot."""
    if procs is None:
        return
    try:
        fd = os.open(procs, os.O_WRONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.write(fd, str(os.getpid()).encode())
    os.close(fd)


def group_parent() -> Path | None:
    """Where the per-command groups go, created once per process, or None where no group
    may be made: `<own cgroup>/devloop`, or as root `<hierarchy root>/devloop` when only
    there the memory and pids controllers can be had (cgroups.py limits commands with them).
    """
    if not _parent:
        _parent.append(_find_parent())
        if _parent[0] is not None:
            sweep_stale(_parent[0])
    return _parent[0]


def sweep_stale(parent: Path) -> None:
    """Remove the empty per-command groups under `parent` whose maker is gone (a worker
    SIGKILLed before it removed them); best effort."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            found = re.fullmatch(r"run-(\d+)-\d+", entry.name)
            if found and entry.is_dir() and not os.path.exists(f"/proc/{found.group(1)}"):
                with contextlib.suppress(OSError):  # EBUSY: something still runs in it
                    os.rmdir(entry.path)


def _find_parent() -> Path | None:
    found = unified()
    if found is None:
        return None
    mount, own = found
    # A group with processes of its own cannot hand controllers to its children (cgroup
    # v2's "no internal processes" rule), so a worker in a busy group (a login session, a
    # service) finds them at the hierarchy's root, where only root may make a group.
    places = [own] + ([mount] if os.geteuid() == 0 and mount != own else [])
    for place in places:
        if os.access(place, os.W_OK) and enable_controllers(place / "devloop"):
            return place / "devloop"
    if not os.access(own, os.W_OK):
        return None
    with contextlib.suppress(OSError):
        (own / "devloop").mkdir(exist_ok=True)
        return own / "devloop"
    return None


def enable_controllers(group: Path) -> bool:
    """Make `group` (if need be) with the memory and pids controllers on for its children;
    whether they are on. Nothing is made where the parent cannot hand them down."""
    parent = group.parent
    wanted = {"memory", "pids"}
    try:
        if not wanted <= set((parent / "cgroup.controllers").read_text().split()):
            return False
        on = set((parent / "cgroup.subtree_control").read_text().split())
        if not wanted <= on:
            (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        group.mkdir(exist_ok=True)
        on = set((group / "cgroup.subtree_control").read_text().split())
        if not wanted <= on:
            (group / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        return True
    except OSError:  # EBUSY: the parent has processes of its own; EACCES: not delegated
        return False
