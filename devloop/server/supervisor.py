"""Own child processes: start them, restart the ones that die, stop them all in order.

    Supervisor(forker=None)
      add(ChildSpec)   start a child (own session, dies with this process even on SIGKILL);
                       one with fork_args is forked from the forker, when there is one
                       (own process group, dies with the forker, which dies with this)
      poll()           reap the dead, restart them after a growing backoff -> [Event]
      stop()           SIGTERM every group (a warm stop), then SIGKILL what is left

A child that keeps dying (more than `crash_restarts` restarts inside `crash_window_s`) is
crash looping: poll() reports it and stops restarting it, and the caller gives up with its
last log lines. Only the main thread may call add() and poll(): a child's death signal
follows the thread that started it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Literal, Protocol

from devloop.safe.private import open_private_log
from devloop.server.deathsig import die_with_parent
from devloop.server.forker import Forker

# A signal that lands while Popen spawns a child is taken again this much later.
SPAWN_RETRY_S = 0.05
_EXECUTE_CHILD = subprocess.Popen._execute_child.__code__  # type: ignore[attr-defined]


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, raised in the main thread so clean-up runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports it (143 for SIGTERM)."""
        return 128 + self.signum


@dataclass
class Received:
    """The signal interrupt_on() turned into Interrupted, if one came. Checked after the
    block too: Python may wrap the Interrupted raised mid-import into another error."""

    signum: int | None = None

    @property
    def exit_code(self) -> int | None:
        return None if self.signum is None else 128 + self.signum


@contextmanager
def interrupt_on(
    signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP),
) -> Iterator[Received]:
    """Turn `signals` into Interrupted while the block runs (Python's default handler for
    SIGTERM exits without running finally blocks, leaving children behind). After the first
    one, further signals are ignored so the clean-up it started can finish."""
    received = Received()

    def handler(signum: int, frame: FrameType | None) -> None:
        if _spawning(frame):
            # Raised here, it is swallowed by an at-fork hook (logging's left its lock held)
            # or loses the child half spawned: the signal comes again once the spawn is done.
            again = threading.Timer(SPAWN_RETRY_S, os.kill, (os.getpid(), signum))
            again.daemon = True
            again.start()
            return
        for sig in signals:
            signal.signal(sig, signal.SIG_IGN)
        received.signum = signum
        raise Interrupted(signum)

    previous: dict[int, Any] = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _spawning(frame: FrameType | None) -> bool:
    """Whether the interrupted code is inside Popen's spawn of a child (its at-fork hooks
    included, which run there)."""
    while frame is not None:
        if frame.f_code is _EXECUTE_CHILD:
            return True
        frame = frame.f_back
    return False


@dataclass(frozen=True)
class ChildSpec:
    """What to run and where its output goes."""

    name: str
    command: list[str]
    env: dict[str, str]
    log: Path | None  # None: the child writes to this process's stdout and stderr
    # What the child gets when this process dies: SIGTERM lets Redis flush its AOF.
    death_signal: int = signal.SIGKILL
    # Descriptors the child inherits under the same numbers (the console's bound sockets).
    pass_fds: tuple[int, ...] = ()
    # What a fork server runs instead of `command`, forked from its warm process (a Celery
    # worker's arguments); `command` is the same child run cold, where there is no forker.
    fork_args: tuple[str, ...] | None = None


class Process(Protocol):
    """What the supervisor needs of a child: subprocess.Popen or a ForkedProcess."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass
class Child:
    """One supervised process and its history."""

    spec: ChildSpec
    proc: Process | None = None
    restarts: int = 0
    exits: deque[float] = field(default_factory=deque)
    restart_at: float | None = None
    last_status: int | None = None
    crash_looping: bool = False

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the child's log."""
        if self.spec.log is None:
            return "(its output went to the terminal)"
        try:
            text = self.spec.log.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Event:
    """Something poll() saw: a child exited, was restarted, or is crash looping."""

    kind: Literal["exited", "restarted", "crash_loop"]
    child: Child
    detail: str


class Supervisor:
    """Starts children and keeps them running until stopped."""

    def __init__(
        self,
        *,
        backoff_s: float = 1.0,
        backoff_cap_s: float = 30.0,
        crash_restarts: int = 5,
        crash_window_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        forker: Forker | None = None,
    ) -> None:
        self.backoff_s, self.backoff_cap_s = backoff_s, backoff_cap_s
        self.crash_restarts, self.crash_window_s = crash_restarts, crash_window_s
        self.clock = clock
        self.forker = forker
        self.children: list[Child] = []

    def add(self, spec: ChildSpec) -> Child:
        """Start a child and supervise it."""
        child = Child(spec)
        self._start(child)
        self.children.append(child)
        return child

    def _start(self, child: Child) -> None:
        spec = child.spec
        child.restart_at = None
        if self.forker is not None and spec.fork_args is not None and spec.log is not None:
            child.proc = self.forker.start(spec.fork_args, spec.log)
            return
        log = None
        if spec.log is not None:
            spec.log.parent.mkdir(parents=True, exist_ok=True)
            log = open_private_log(spec.log)  # 0600, never through a link
        try:
            child.proc = subprocess.Popen(
                spec.command,
                env=spec.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT if log is not None else None,
                # Its own session: a Ctrl-C meant for us reaches it only through stop().
                start_new_session=True,
                preexec_fn=die_with_parent(spec.death_signal),
                pass_fds=spec.pass_fds,
            )
        finally:
            if log is not None:
                os.close(log)  # the child has its own copy

    def delay(self, child: Child) -> float:
        """The wait before the next restart: doubling with each recent exit, capped."""
        recent = max(0, len(child.exits) - 1)
        return min(self.backoff_cap_s, self.backoff_s * 2**recent)

    def poll(self) -> list[Event]:
        """Reap dead children, schedule and perform restarts; what happened, in order."""
        events: list[Event] = []
        now = self.clock()
        for child in self.children:
            if child.crash_looping:
                continue
            if child.proc is not None and child.restart_at is None:
                status = child.proc.poll()
                if status is None:
                    continue
                child.last_status = status
                child.exits.append(now)
                while child.exits and now - child.exits[0] > self.crash_window_s:
                    child.exits.popleft()
                detail = _describe(status)
                events.append(Event("exited", child, detail))
                if len(child.exits) > self.crash_restarts:
                    child.crash_looping = True
                    events.append(
                        Event(
                            "crash_loop",
                            child,
                            f"{child.spec.name} died {len(child.exits)} times in "
                            f"{self.crash_window_s:.0f} s (last: {detail})",
                        )
                    )
                    continue
                child.restart_at = now + self.delay(child)
            if child.restart_at is not None and now >= child.restart_at:
                self._start(child)
                child.restarts += 1
                events.append(Event("restarted", child, f"restart {child.restarts}"))
        return events

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM every child's group (a warm stop), wait, then SIGKILL what is left."""
        live = [c.proc for c in self.children if c.alive and c.proc is not None]
        for proc in live:
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for proc in live:
            # The group too: a worker's pool processes outlive a main process that is gone.
            _signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for child in self.children:
            child.restart_at = None
            child.crash_looping = True  # stopped for good: poll() leaves it alone
        if self.forker is not None:
            self.forker.close()


def _describe(status: int) -> str:
    """`exit status 3` or `killed by SIGKILL`."""
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-status).name}"
        return f"killed by signal {-status}"
    return f"exit status {status}"


def _signal_group(pid: int, sig: int) -> None:
    if pid <= 0:
        return  # a forked child that never started: killpg(-1) would signal everything
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
