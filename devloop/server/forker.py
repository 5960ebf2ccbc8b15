"""A fork server: one process imports a heavy stack once, then forks children that run it.

A Celery worker node started as a process of its own imports Celery, DevLoop and (in its
pool process) the model SDK: about 2 CPU-seconds before it takes a task, once per node and
again at every restart. Forked from a process that imported them before any thread
started, a node starts with nothing left to import.

    Forker(command, env, log)       the client: starts `command`, a process that calls serve()
      start(args, log)              fork a child running `args` -> ForkedProcess (Popen-like)
      close()                       end the server (its children die with it)
    serve(run)                      the server's loop: fork a child per request, run(args) in it

The protocol, one JSON object per line: the client writes `{"id": I, "args": [...], "log":
path}`; the server answers `{"id": I, "pid": N}` and reports `{"exited": N, "code": C}` (C as
Popen's returncode: -9 for SIGKILL) when a child ends. A child has its own process group
before its pid is answered (so a signal to the group never misses it), its log (0600, never
through a link) as stdout and stderr, and dies when the server dies (PR_SET_PDEATHSIG); the
server has its own session and dies with the thread that started it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from devloop.safe.private import open_private_log
from devloop.server.deathsig import die_with_parent, follow_parent

START_WAIT_S = 120.0  # the server's imports on a loaded machine, before its first answer
GONE = -signal.SIGKILL  # what a child of a dead server is reported as: it was SIGKILLed


class ForkedProcess:
    """A child of the fork server, with the part of Popen's interface a supervisor uses."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._pid: int | None = None
        self.returncode: int | None = None
        self._known = threading.Event()  # the pid (or the server's end) arrived
        self._ended = threading.Event()

    @property
    def pid(self) -> int:
        """The child's pid (waits for the server's answer); -1 if it never started."""
        self._known.wait(START_WAIT_S)
        return -1 if self._pid is None else self._pid

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code; subprocess.TimeoutExpired after `timeout` seconds, as Popen."""
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(f"forked child {self._pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def _started(self, pid: int) -> None:
        self._pid = pid
        self._known.set()

    def _exited(self, code: int) -> None:
        self.returncode = code
        self._known.set()
        self._ended.set()


@dataclass
class _Server:
    """One fork server process and the children it was asked for."""

    proc: subprocess.Popen[bytes]
    waiting: dict[int, ForkedProcess] = field(default_factory=dict)  # by request id
    live: dict[int, ForkedProcess] = field(default_factory=dict)  # by pid


class Forker:
    """The client end: starts the server on first use (and again if it died)."""

    def __init__(self, command: list[str], env: Mapping[str, str], log: Path) -> None:
        self.command, self.env, self.log = command, dict(env), log
        self._server: _Server | None = None
        self._lock = threading.Lock()
        self._asked = 0

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        server = self._server
        return server.proc.pid if server is not None and server.proc.poll() is None else None

    def start(self, args: Sequence[str], log: Path) -> ForkedProcess:
        """Ask for a child running `args` with `log` as its output; returns at once (the pid
        comes when the server answers). Only the main thread may call it (PDEATHSIG)."""
        child = ForkedProcess(log)
        # Made here, as for a child run on its own: the log is there from the start, and a
        # link in its place is refused now, in the caller (the child refuses one too).
        os.close(open_private_log(log))
        with self._lock:
            server = self._running()
            self._asked += 1
            request = {"id": self._asked, "args": list(args), "log": str(log)}
            # Listed before it is sent: an answer never finds no one waiting for it.
            server.waiting[self._asked] = child
            try:
                assert server.proc.stdin is not None
                server.proc.stdin.write(json.dumps(request).encode() + b"\n")
                server.proc.stdin.flush()
            except OSError:
                pass  # the server died: its reader reports the child as gone
        return child

    def close(self, timeout_s: float = 5.0) -> None:
        """End the server: its stdin closes, and any child still alive dies with it."""
        with self._lock:
            server, self._server = self._server, None
        if server is None:
            return
        with contextlib.suppress(OSError):
            assert server.proc.stdin is not None
            server.proc.stdin.close()
        try:
            server.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait(timeout=5)

    def _running(self) -> _Server:
        if self._server is not None and self._server.proc.poll() is None:
            return self._server
        self.log.parent.mkdir(parents=True, exist_ok=True)
        log = open_private_log(self.log)
        try:
            proc = subprocess.Popen(
                self.command, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=log, start_new_session=True, preexec_fn=die_with_parent(),
            )
        finally:
            os.close(log)
        self._server = _Server(proc)
        threading.Thread(target=self._read, args=(self._server,), name="forker-reader",
                         daemon=True).start()
        return self._server

    def _read(self, server: _Server) -> None:
        """Route one server's answers to its children until it ends; then every child it
        had is gone (they die with it) and every unanswered request failed."""
        assert server.proc.stdout is not None
        for line in server.proc.stdout:
            try:
                message = json.loads(line)
            except ValueError:
                continue  # a library's print before serve() took stdout over: not an answer
            with self._lock:
                if "pid" in message:
                    if (child := server.waiting.pop(message["id"], None)) is not None:
                        server.live[message["pid"]] = child
                        child._started(message["pid"])
                elif (ended := server.live.pop(message["exited"], None)) is not None:
                    ended._exited(message["code"])
        code = server.proc.wait()
        with self._lock:
            unborn, lost = list(server.waiting.values()), list(server.live.values())
            server.waiting.clear()
            server.live.clear()
        for child in unborn + lost:
            # In the child's own log, which a crash loop quotes: why it never ran, or died.
            self._note_end(child.log, code, started=child in lost)
            child._exited(GONE if child in lost else code)

    def _note_end(self, log: Path, code: int, started: bool) -> None:
        what = "died with it" if started else "was never started"
        lines = [f"the fork server ({' '.join(self.command)}) ended ({_described(code)}); "
                 f"this worker {what}; the last lines of {self.log}:"]
        with contextlib.suppress(OSError):
            lines += self.log.read_text(errors="replace").splitlines()[-15:]
        with contextlib.suppress(OSError), os.fdopen(open_private_log(log), "a") as out:
            out.write("\n".join(lines) + "\n")


def _described(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit status {code}"


def serve(run: Callable[[list[str]], int]) -> None:
    """The server's loop, on stdin and stdout, until stdin ends: fork a child per request
    and call run(args) in it; report each child's end. Call it before any thread starts."""
    # What the server imported lives as long as it does: frozen, no collection scans it
    # again, here or in a forked node (which would copy every page the scan touched).
    gc.freeze()
    # The answers get a descriptor of their own; what anything else prints to stdout from
    # now on (a library, a child before its log is in place) goes to the server's log.
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)  # SIGCHLD wakes the select below
    signal.signal(signal.SIGCHLD, lambda *_: None)
    pending = b""
    while True:
        ready, _, _ = select.select([0, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _report_ended(out)
        if 0 not in ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return  # the client closed: our children die with us
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            pid = _fork(run, request["args"], Path(request["log"]),
                        (wake_r, wake_w, out.fileno()))
            _say(out, {"id": request["id"], "pid": pid})


def _fork(run: Callable[[list[str]], int], args: list[str], log: Path,
          server_fds: tuple[int, ...]) -> int:
    server = os.getpid()
    pid = os.fork()
    if pid:
        # Its own group (stop() signals the child and its pool together), set on both sides
        # so it is there before the pid is answered, whichever of the two runs first.
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)
        return pid
    code = 1
    try:
        follow_parent(parent=server)
        os.setpgid(0, 0)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in server_fds:
            os.close(fd)
        _redirect(log)
        code = run(args)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _redirect(log: Path) -> None:
    """stdin from /dev/null; stdout and stderr to the log (the server's pipes are not ours)."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    handle = open_private_log(log)
    os.dup2(handle, 1)
    os.dup2(handle, 2)
    os.close(handle)


def _report_ended(out: IO[str]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say(out, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _say(out: IO[str], message: dict[str, Any]) -> None:
    out.write(json.dumps(message) + "\n")
    out.flush()
