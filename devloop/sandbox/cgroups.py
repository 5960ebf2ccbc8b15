"""Memory and process caps on a command as a whole, in cgroups, where the host allows them.

    CommandCaps      one command's caps: made before it starts, joined in the child, closed after
    where_caps_hold  where each cap holds on this host, as lines for the log and diagnostics

The rlimits hold per process (RLIMIT_DATA): a command of many processes could hold many
times that. A cgroup holds them all, its /tmp (tmpfs pages) included:

- cgroup v2: memory.max (no swap; the whole group killed at once when it runs out) and
  pids.max on the meter's per-command group, when the memory and pids controllers are on
  above it (meter.enable_controllers);
- cgroup v1: a group of the command's own in the memory and in the pids hierarchy;
- neither (a non-root worker with no delegated subtree, a container whose cgroup file
  system is read-only): each process is held by RLIMIT_DATA and the command's processes by
  RLIMIT_NPROC in its user namespace; the container's or the host's own limit bounds the
  total. Said once in the worker's log and by `devloop sandbox limits`, never an error.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from devloop.sandbox.meter import group_parent, join_group, sweep_stale

log = logging.getLogger(__name__)
_OOM_KILL = re.compile(r"^oom_kill (\d+)", re.M)
_counter = itertools.count()
_v1_parents: dict[str, Path | None] = {}


@dataclass(frozen=True)
class Holding:
    """Where the memory cap and the process cap of a command hold: "cgroup v2", "cgroup v1"
    or "" (per-process rlimits only)."""

    memory: str
    processes: str


def where_caps_hold() -> Holding:
    """Where a command's caps would hold, were one started now from this process."""
    parent = group_parent()
    enabled = _read(parent / "cgroup.subtree_control").split() if parent else []
    return Holding(
        memory="cgroup v2" if "memory" in enabled else "cgroup v1" if v1_parent("memory") else "",
        processes="cgroup v2" if "pids" in enabled else "cgroup v1" if v1_parent("pids") else "",
    )


def describe(holding: Holding, memory_bytes: int, processes: int) -> list[str]:
    """One line per cap saying where it holds (and, where no cgroup does, what does)."""
    mib = memory_bytes // 2**20
    return [
        f"memory per command: {mib} MiB for all its processes together ({holding.memory})"
        if holding.memory
        else f"memory per command: no cgroup here (not root, or no delegated memory "
        f"controller): each process is held to {mib} MiB of writable memory (RLIMIT_DATA) "
        "and the command as a whole only by the container's or host's limit",
        f"processes per command: {processes} (RLIMIT_NPROC in its own user namespace, "
        f"and {holding.processes} pids.max)"
        if holding.processes
        else f"processes per command: {processes} (RLIMIT_NPROC in its own user namespace; "
        "no pids cgroup here)",
    ]


_said: list[bool] = []


def say_once(memory_bytes: int, processes: int) -> None:
    """Log where the caps hold, once per process (a warning where no cgroup holds one)."""
    if _said:
        return
    _said.append(True)
    holding = where_caps_hold()
    for line in describe(holding, memory_bytes, processes):
        level = logging.WARNING if "no cgroup" in line or "no pids" in line else logging.INFO
        log.log(level, "sandbox limits: %s", line)


def v1_parent(controller: str) -> Path | None:
    """`<own group>/devloop` in the cgroup v1 hierarchy of `controller`, made once per
    process, or None where that hierarchy is not mounted or not ours to write."""
    if controller not in _v1_parents:
        found = None
        own = _v1_own(controller)
        if own is not None and os.access(own, os.W_OK):
            with contextlib.suppress(OSError):
                (own / "devloop").mkdir(exist_ok=True)
                found = own / "devloop"
                sweep_stale(found)
        _v1_parents[controller] = found
    return _v1_parents[controller]


def _v1_own(controller: str) -> Path | None:
    """This process's directory in the v1 hierarchy that holds `controller`, if mounted."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        groups = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    own = next(
        (ln.split(":", 2)[2] for ln in groups
         if ln.count(":") >= 2 and controller in ln.split(":", 2)[1].split(",")),
        None,
    )
    for line in mounts:
        fields = line.split()
        if " - cgroup " not in line or controller not in fields[-1].split(","):
            continue
        root, mount = fields[3], fields[4]
        if own is not None and (own == root or own.startswith(root.rstrip("/") + "/")):
            return Path(mount) / own[len(root.rstrip("/")):].lstrip("/")
    return None


class CommandCaps:
    """The memory and process caps of one command, in the cgroups that hold them here."""

    def __init__(self, memory_bytes: int, processes: int, v2_group: Path | None) -> None:
        self._groups: list[Path] = []  # v1 groups made for this command
        self._oom: Path | None = None  # the file whose oom_kill count says it ran out
        memory = processes_at = ""
        if v2_group is not None:
            enabled = _read(v2_group.parent / "cgroup.subtree_control").split()
            if "memory" in enabled and _write_all(
                v2_group, {"memory.max": memory_bytes, "memory.swap.max": 0,
                           "memory.oom.group": 1}
            ):
                memory, self._oom = "cgroup v2", v2_group / "memory.events"
            if "pids" in enabled and _write_all(v2_group, {"pids.max": processes}):
                processes_at = "cgroup v2"
        name = v2_group.name if v2_group else f"run-{os.getpid()}-{next(_counter)}"
        # memsw (memory + swap) may only be set at or above the memory limit: after it.
        if not memory and self._v1_group("memory", name, {
            "memory.limit_in_bytes": memory_bytes, "memory.memsw.limit_in_bytes": memory_bytes
        }):
            memory, self._oom = "cgroup v1", self._groups[-1] / "memory.oom_control"
        if not processes_at and self._v1_group("pids", name, {"pids.max": processes}):
            processes_at = "cgroup v1"
        self.holding = Holding(memory, processes_at)
        self._procs = [str(g / "cgroup.procs") for g in self._groups]

    def _v1_group(self, controller: str, name: str, values: dict[str, int]) -> bool:
        """Make the command's group in the v1 hierarchy of `controller` with `values`."""
        parent = v1_parent(controller)
        if parent is None:
            return False
        try:
            (parent / name).mkdir()
        except OSError:
            return False
        self._groups.append(parent / name)
        return _write_all(parent / name, values)

    def join(self) -> None:
        """Move the calling process into the v1 groups (in the child, before it drops root;
        the v2 group is the meter's, which it joins)."""
        for procs in self._procs:
            join_group(procs)

    def oom_kills(self) -> int:
        """How many of the command's processes the kernel killed for want of memory."""
        found = _OOM_KILL.search(_read(self._oom)) if self._oom else None
        return int(found.group(1)) if found else 0

    def kill(self) -> None:
        """SIGKILL every process left in the v1 groups (v2's cgroup.kill is the meter's)."""
        for group in self._groups:
            for pid in _read(group / "cgroup.procs").split():
                with contextlib.suppress(OSError):
                    os.kill(int(pid), signal.SIGKILL)

    def close(self) -> None:
        """Kill what is left and remove the v1 groups."""
        self.kill()
        for group in self._groups:
            for delay in (0.0, 0.01, 0.05, 0.1, 0.25, 0.5):
                time.sleep(delay)
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the killed processes are being reaped
                    self.kill()


def _write_all(group: Path, values: dict[str, int]) -> bool:
    """Write the values in order, the first always and the rest where the kernel has their
    file; whether all of them took."""
    try:
        for index, (name, value) in enumerate(values.items()):
            if index == 0 or (group / name).exists():
                (group / name).write_text(str(value))
    except OSError:
        return False
    return True


def _read(path: Path | None) -> str:
    """A cgroup file's text, or "" when it cannot be read."""
    if path is None:
        return ""
    try:
        return path.read_text()
    except OSError:
        return ""
