"""The processes a test started, found through /proc, and how to end them all."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    """One process: its pid, parent, state (Z: a zombie) and command line."""

    pid: int
    ppid: int
    state: str
    cmdline: str

    def __str__(self) -> str:
        return f"{self.pid} (parent {self.ppid}): {self.cmdline[:200]}"


def processes() -> dict[int, Proc]:
    """Every process on the machine right now, by pid."""
    found: dict[int, Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # exited while we looked
        # The command name is in parentheses and may hold spaces or parentheses itself.
        fields = stat[stat.rindex(")") + 2 :].split()
        cmdline = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        found[int(entry.name)] = Proc(int(entry.name), int(fields[1]), fields[0], cmdline)
    return found


def alive(pid: int) -> bool:
    """Whether pid is a live process (a zombie is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def descendants(root: int) -> list[Proc]:
    """The live (not zombie) processes below `root`, parents before children."""
    table = processes()
    children: dict[int, list[Proc]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc)
    out: list[Proc] = []
    todo = list(children.get(root, []))
    while todo:
        proc = todo.pop(0)
        if proc.state != "Z":
            out.append(proc)
        todo += children.get(proc.pid, [])
    return out


def kill_tree(root: int) -> list[Proc]:
    """SIGKILL `root` and everything below it; the list of what was killed."""
    victims = descendants(root)
    with contextlib.suppress(ProcessLookupError):
        os.kill(root, signal.SIGKILL)
    for proc in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGKILL)
    return victims


def run_bounded(
    argv: list[str], *, timeout: float, input: str | None = None, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    """subprocess.run(text, captured, `input` on stdin) that, past `timeout`, kills the whole
    tree it started (workers and Redis in sessions of their own included) before raising
    TimeoutExpired."""
    stdin = subprocess.PIPE if input is not None else kwargs.pop("stdin", None)
    with subprocess.Popen(  # type: ignore[call-overload]
        argv, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs
    ) as proc:
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(argv, timeout, out, err) from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def carrying(name: str, value: str) -> list[Proc]:
    """Live processes whose environment, as they were started, holds name=value.

    Everything a test session starts inherits its environment (workers, Redis, `devloop`
    subprocesses, browsers), whoever its parent is now; sandboxes do not (theirs is
    rebuilt), but they die with the worker that started them.
    """
    marker = f"{name}={value}".encode()
    found = []
    for proc in processes().values():
        if proc.state == "Z" or proc.pid == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
        except OSError:
            continue  # exited, or not ours to read
        if marker in environ.split(b"\0"):
            found.append(proc)
    return found


def wait_for_port(
    port: int, proc: subprocess.Popen[bytes], timeout_s: float = 30.0,
    why: Callable[[], str] = lambda: "",
) -> None:
    """Wait until 127.0.0.1:port accepts connections (AssertionError with why() if proc
    exits first or timeout_s passes)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, why()
            time.sleep(0.1)
