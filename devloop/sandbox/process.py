"""Run one child process: rlimits, its own session, a wall clock, capped output."""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from devloop.sandbox.base import Limits, Observation

_CHUNK = 64 * 1024
# How long to wait for the output pipes to close once the process group is dead; only a
# process that left the group (setsid in an unsandboxed run) can hold them longer.
_DRAIN_S = 2.0


@dataclass
class CappedOutput:
    """Keeps the first `cap` bytes of a stream and counts the rest, reading in chunks."""

    cap: int
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0

    def pump(self, stream: IO[bytes]) -> None:
        """Read `stream` to EOF; never holds more than `cap` bytes plus one chunk."""
        fd = stream.fileno()
        try:
            while chunk := os.read(fd, _CHUNK):
                room = self.cap - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - max(room, 0))
        finally:
            stream.close()

    @property
    def truncated(self) -> bool:
        """Whether anything was cut."""
        return self.dropped > 0

    def text(self) -> str:
        """The kept bytes as text, with a marker saying how much was cut."""
        text = self.kept.decode("utf-8", errors="replace")
        if self.dropped:
            text += f"\n[... {self.dropped} bytes truncated ...]\n"
        return text


def limit_setter(limits: Limits, *, processes: bool = True) -> Callable[[], None]:
    """A preexec_fn that applies `limits` in the child, after it changed uid."""
    wanted = [
        (resource.RLIMIT_DATA, limits.data_bytes, limits.data_bytes),
        (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
        # The soft CPU limit sends SIGXCPU; the hard one, a little later, SIGKILL.
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 5),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    if processes:
        wanted.append((resource.RLIMIT_NPROC, limits.processes, limits.processes))

    def apply() -> None:
        current = os.getpriority(os.PRIO_PROCESS, 0)
        if limits.nice > current:
            os.setpriority(os.PRIO_PROCESS, 0, limits.nice)
        for which, soft, hard in wanted:
            _, current_hard = resource.getrlimit(which)
            if current_hard != resource.RLIM_INFINITY:
                hard = min(hard, current_hard)
            resource.setrlimit(which, (min(soft, hard), hard))

    return apply


def exit_status(returncode: int) -> int:
    """A shell-style exit status: 128+N when killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run_process(
    argv: Sequence[str],
    *,
    env: dict[str, str],
    cwd: str,
    timeout_s: float | None,
    output_cap: int,
    preexec: Callable[[], None],
    user: int | None = None,
    group: int | None = None,
    nice: int = 0,
) -> Observation:
    """Run argv in a new session at `nice`; on timeout, and after it exits, kill its group."""
    started = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
        preexec_fn=preexec,
        user=user,
        group=group,
        # Dropping to another uid must drop root's supplementary groups (gid 0) too.
        extra_groups=[] if user is not None else None,
        close_fds=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lower_autogroup(proc.pid, nice)
    out, err = CappedOutput(output_cap), CappedOutput(output_cap)
    readers = [
        threading.Thread(target=out.pump, args=(proc.stdout,), daemon=True),
        threading.Thread(target=err.pump, args=(proc.stderr,), daemon=True),
    ]
    for reader in readers:
        reader.start()
    timed_out = not _wait_unreaped(proc.pid, timeout_s)
    # The leader is alive or a zombie (not reaped yet), so its group id is still ours:
    # kill every process left in the group, background children included.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    returncode = proc.wait()
    for reader in readers:
        reader.join(_DRAIN_S)
    return Observation(
        exit_code=exit_status(returncode),
        stdout=out.text(),
        stderr=err.text(),
        duration_ms=round((time.monotonic() - started) * 1000),
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
    )


def lower_autogroup(pid: int, nice: int) -> None:
    """Set the nice level of pid's session as a whole (its scheduler autogroup); best effort.

    Where the kernel groups tasks by session (CONFIG_SCHED_AUTOGROUP, on by default on
    most distributions), a session competes with every other one at its autogroup's
    weight, whatever the nice values inside it: a sandbox in a session of its own would
    weigh as much as a whole worker. Root may set it any time; other users at most once
    per 100 ms across the machine (EAGAIN), which leaves them the per-process nice.
    """
    if nice <= 0:
        return
    with contextlib.suppress(OSError):  # no autogroup support, the rate limit, or exited
        Path(f"/proc/{pid}/autogroup").write_text(str(nice))


def _wait_unreaped(pid: int, timeout_s: float | None) -> bool:
    """Wait for `pid` to exit without reaping it; False when the timeout passed first."""
    fd = os.pidfd_open(pid)
    try:
        # select() retries on EINTR with the remaining timeout (PEP 475).
        ready, _, _ = select.select([fd], [], [], timeout_s)
        return bool(ready)
    finally:
        os.close(fd)
