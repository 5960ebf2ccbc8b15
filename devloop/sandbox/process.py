"""Run one child process: rlimits, its own session, time and CPU limits, capped output."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import resource
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from devloop.sandbox.base import Limit, Limits, Observation
from devloop.sandbox.cgroups import CommandCaps
from devloop.sandbox.meter import Meter, make_meter
from devloop.sandbox.weight import join

log = logging.getLogger(__name__)
_CHUNK = 64 * 1024
# How long to wait for the output pipes to close once the process group is dead; only a
# process that left the group (setsid in an unsandboxed run) can hold them longer.
_DRAIN_S = 2.0
# How often the limits are checked while a command runs (two small cgroup reads each).
_POLL_S = 0.5
# A command starved of CPU gets this many times its limit in wall time before it is killed.
STARVED_FACTOR = 3.0


# Where a command's output goes as it is read: (stream name "stdout" | "stderr", chunk).
OutputSink = Callable[[str, bytes], None]


class OutputTally:
    """A sink that knows how many bytes of each stream the command has written so far, read
    or not: what its readers took from the pipes plus what still waits there (FIONREAD).

    Both are taken under one lock, which a reader holds while it takes a chunk from its pipe
    and counts it: a position is never seen between the two (output written before a
    channel record then always lies before the record's mark, however far the readers
    lag). Chunks go on to `sink` outside the lock.
    """

    def __init__(self, sink: OutputSink | None = None) -> None:
        self.sink = sink
        self.lock = threading.Lock()
        self._read: dict[str, int] = {}
        self._fds: dict[str, int] = {}

    def __call__(self, name: str, chunk: bytes) -> None:
        if self.sink is not None:
            self.sink(name, chunk)

    def watch(self, name: str, fd: int) -> None:
        """Count the stream `name`, read from `fd` by a reader that calls read()."""
        with self.lock:
            self._fds[name] = fd
            self._read.setdefault(name, 0)

    def closing(self, name: str) -> None:
        """The reader of `name` is about to close its pipe: its count is final (the fd's
        number may be another file's next)."""
        with self.lock:
            self._fds[name] = -1

    def read(self, name: str, fd: int) -> bytes:
        """Take a chunk from a readable pipe and count it, as one step."""
        with self.lock:
            chunk = os.read(fd, _CHUNK)
            self._read[name] = self._read.get(name, 0) + len(chunk)
            return chunk

    def positions(self) -> dict[str, int]:
        """Every stream's bytes written so far, taken at one moment."""
        with self.lock:
            return {name: self._read[name] + _pending(fd) for name, fd in self._fds.items()}


def _pending(fd: int) -> int:
    """Bytes waiting in a pipe (0 once it is closed)."""
    if fd < 0:
        return 0
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


@dataclass
class CappedOutput:
    """Keeps the first `cap` bytes of a stream and counts the rest, reading in chunks;
    `on_chunk` sees each chunk as it is read (a live view of a running test)."""

    cap: int
    kept: bytearray = field(default_factory=bytearray)
    dropped: int = 0
    on_chunk: Callable[[bytes], None] | None = None

    def pump(self, stream: IO[bytes], tally: tuple[OutputTally, str] | None = None) -> None:
        """Read `stream` to EOF; never holds more than `cap` bytes plus one chunk. With a
        tally, each chunk is taken and counted as one step, once the pipe is readable."""
        fd = stream.fileno()
        readable = None
        if tally is not None:  # poll, not select: a worker's fds may pass 1024
            readable = select.poll()
            readable.register(fd, select.POLLIN)
        try:
            while chunk := _next_chunk(fd, tally, readable):
                if self.on_chunk is not None:
                    self.on_chunk(chunk)
                room = self.cap - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]
                self.dropped += max(0, len(chunk) - max(room, 0))
        finally:
            if tally is not None:
                tally[0].closing(tally[1])
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


def _next_chunk(
    fd: int, tally: tuple[OutputTally, str] | None, readable: select.poll | None
) -> bytes:
    if tally is None or readable is None:
        return os.read(fd, _CHUNK)
    readable.poll()  # data, EOF or an error: the read below does not block
    counter, name = tally
    return counter.read(name, fd)


def limit_setter(limits: Limits) -> Callable[[], None]:
    """A preexec_fn that applies `limits` in the child, after it changed uid.

    Not RLIMIT_NPROC: the kernel counts it per uid in each user namespace and checks the
    count of every enclosing one against the limit the namespace was made under, so set
    here it would count the worker's (or every sandbox's) processes too. The sandbox sets
    it inside its own namespace instead (bwrap.py), where only the command's count."""
    wanted = [
        (resource.RLIMIT_DATA, limits.data_bytes, limits.data_bytes),
        (resource.RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes),
        # The soft CPU limit sends SIGXCPU; the hard one, a little later, SIGKILL.
        (resource.RLIMIT_CPU, limits.cpu_s, limits.cpu_s + 5),
        (resource.RLIMIT_CORE, 0, 0),
    ]

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
    pass_fds: Sequence[int] = (),
    cpu_group: str | None = None,
    on_output: OutputSink | None = None,
    caps: Limits | None = None,
) -> Observation:
    """Run argv in a new session at `nice`; on a limit, and after it exits, kill its group.

    The limit is on the time the command was given, not on the wall clock: time its
    processes spent runnable but waiting for a CPU (a loaded machine) does not count,
    up to `STARVED_FACTOR` times the limit of wall time. All its processes together may
    use `timeout_s` seconds of CPU. `pass_fds` stay open in the child at the same numbers;
    `cpu_group` is the cgroup.procs file of the sandboxes' shared CPU weight, if any;
    `on_output` sees every chunk of stdout and stderr as it is read (an OutputTally also
    counts them, with what waits in the pipes). `caps` gives the
    memory and process caps on the command as a whole, in cgroups where the host has them;
    a command the kernel killed for want of memory there is killed whole (limit "memory").
    """
    meter = make_meter()
    groups = CommandCaps(caps.memory_bytes, caps.processes, meter.group) if caps else None
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_child_setup(meter, groups, cpu_group, preexec, user, group),
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )
    except BaseException:
        meter.close()  # its cgroups, if it made some
        if groups is not None:
            groups.close()
        raise
    assert proc.stdout is not None and proc.stderr is not None
    meter.start(proc.pid)
    lower_autogroup(proc.pid, nice)
    out, err = CappedOutput(output_cap), CappedOutput(output_cap)
    if on_output is not None:
        out.on_chunk = functools.partial(_forward, on_output, "stdout")
        err.on_chunk = functools.partial(_forward, on_output, "stderr")
    tally = on_output if isinstance(on_output, OutputTally) else None
    if tally is not None:
        tally.watch("stdout", proc.stdout.fileno())
        tally.watch("stderr", proc.stderr.fileno())
    readers = [
        threading.Thread(target=out.pump, args=(proc.stdout, tally and (tally, "stdout")),
                         daemon=True),
        threading.Thread(target=err.pump, args=(proc.stderr, tally and (tally, "stderr")),
                         daemon=True),
    ]
    for reader in readers:
        reader.start()
    limit = _watch(proc.pid, meter, groups, started, timeout_s)
    # The leader is alive or a zombie (not reaped yet), so its group id is still ours:
    # kill every process left in the group, background children included.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    meter.kill()
    if groups is not None:
        groups.kill()
    returncode = proc.wait()
    wall = time.monotonic() - started
    if limit is None and groups is not None and groups.oom_kills():
        limit = "memory"  # ran out between two looks, or as it ended (before v2's group goes)
    usage = meter.close()
    if groups is not None:
        groups.close()
    for reader in readers:
        reader.join(_DRAIN_S)
    return Observation(
        exit_code=exit_status(returncode),
        stdout=out.text(),
        stderr=err.text(),
        duration_ms=round(wall * 1000),
        timed_out=limit is not None,
        truncated=out.truncated or err.truncated,
        cpu_s=round(usage.cpu_s, 3),
        wait_s=round(min(usage.wait_s, wall), 3),
        limit=limit,
        meter=meter.source,
    )


def _forward(sink: OutputSink, name: str, chunk: bytes) -> None:
    """Hand a chunk on; a sink that fails never stops the pipe from being drained."""
    try:
        sink(name, chunk)
    except Exception:  # a live view is best effort; the capture is what counts
        log.warning("live output of a command could not be forwarded", exc_info=True)


def _child_setup(
    meter: Meter,
    groups: CommandCaps | None,
    cpu_group: str | None,
    preexec: Callable[[], None],
    user: int | None,
    group: int | None,
) -> Callable[[], None]:
    """Join the cgroups (while still privileged), drop to user:group, then `preexec`."""

    def setup() -> None:
        meter.join()
        if groups is not None:
            groups.join()
        join(cpu_group)
        if user is not None:
            # Dropping to another uid must drop root's supplementary groups (gid 0) too.
            os.setgroups([])
            gid = group if group is not None else user
            os.setregid(gid, gid)
            os.setreuid(user, user)
        preexec()

    return setup


def _watch(
    pid: int, meter: Meter, groups: CommandCaps | None, started: float, timeout_s: float | None
) -> Limit | None:
    """Wait for `pid` to exit without reaping it; the limit it reached first, if any."""
    fd = os.pidfd_open(pid)
    try:
        while True:
            if groups is not None and groups.oom_kills():
                return "memory"
            if timeout_s is None:
                ready, _, _ = select.select([fd], [], [], _POLL_S)
                if ready:
                    return None
                continue
            wall = time.monotonic() - started
            use = meter.usage()
            given = wall - use.wait_s
            if use.cpu_s >= timeout_s:
                return "cpu"
            if given >= timeout_s:
                return "time"
            if wall >= timeout_s * STARVED_FACTOR:
                return "starved"
            # Given time never runs faster than the wall clock: sleep until it could be up.
            step = min(timeout_s - given, timeout_s * STARVED_FACTOR - wall, _POLL_S)
            # select() retries on EINTR with the remaining timeout (PEP 475).
            ready, _, _ = select.select([fd], [], [], max(step, 0.01))
            if ready:
                return None
    finally:
        os.close(fd)


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
