"""One CPU weight for all the sandboxes of a host: a cgroup, where the worker may make one.

Every sandboxed process of every worker on the host joins one cpu cgroup whose weight is
`DEVLOOP_SANDBOX_CPU_SHARES` (1024, cgroup v1's default, weighs as much as one nice-0
session). Together the sandboxes then compete like one ordinary program: beside busy
neighbours they still get their share (an autogroup at nice 19 got 1.5 % of a core and
a 0.45 s test took 29.5 s), and however many run at once, the worker's own processes and
Redis weigh as much as all of them. Where no group can be made (not root, no cpu
controller) `DEVLOOP_SANDBOX_NICE` applies instead, per sandbox session (autogroup).

cgroup v1 (`/sys/fs/cgroup/cpu`, cpu.shares) is joined in the child before exec; on
cgroup v2 the meter's per-command groups sit under `<own cgroup>/devloop`, whose
cpu.weight is set when the cpu controller is enabled there.
"""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

from devloop.sandbox.meter import group_parent, join_group

V1_CPU = Path("/sys/fs/cgroup/cpu")
GROUP = "devloop-sandboxes"


@functools.cache
def sandbox_group(shares: int) -> str | None:
    """The cgroup.procs file sandboxed processes join (v1), or None; sets the weight."""
    if shares <= 0 or os.geteuid() != 0:
        return None
    _v2_weight(shares)
    own = _v1_cpu_path()
    if own is None:
        return None
    group = V1_CPU / own.lstrip("/") / GROUP
    try:
        group.mkdir(exist_ok=True)
        if (group / "cpu.shares").read_text().strip() != str(shares):
            (group / "cpu.shares").write_text(str(shares))
    except OSError:
        return None
    return str(group / "cgroup.procs")


def _v1_cpu_path() -> str | None:
    """This process's cgroup in the v1 cpu hierarchy, when that hierarchy is mounted."""
    if not (V1_CPU / "cpu.shares").exists():
        return None
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpu" in controllers.split(","):
                return path
    return None


def _v2_weight(shares: int) -> None:
    """cpu.weight of the v2 group the meter's per-command groups live in, where it exists."""
    parent = group_parent()
    if parent is None or not (parent / "cpu.weight").exists():
        return
    # v2's default weight 100 is v1's 1024 shares.
    with contextlib.suppress(OSError):
        (parent / "cpu.weight").write_text(str(max(1, min(10000, round(shares * 100 / 1024)))))


def join(procs: str | None) -> None:
    """Move the calling process into the group (in the child, before it drops root)."""
    join_group(procs)
