"""Start and stop the processes `devloop run` owns: Celery workers and Flower."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

QUEUE_LIST = "coder,tester,control"


def worker_command(
    queues: str = QUEUE_LIST,
    concurrency: int = 1,
    name: str = "devloop@%h",
    loglevel: str = "WARNING",
) -> list[str]:
    """`celery worker` with DevLoop's defaults (prefork, events on, no gossip or mingle)."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.app",
        "worker",
        "-Q",
        queues,
        "-c",
        str(concurrency),
        "-n",
        name,
        "--pool",
        "prefork",
        "-E",
        "--loglevel",
        loglevel,
        "--without-gossip",
        "--without-mingle",
    ]


def flower_command(port: int) -> list[str]:
    """Flower on the same broker."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.app",
        "flower",
        f"--port={port}",
        "--address=127.0.0.1",
    ]


def spawn(command: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child in its own process group, output to a log file."""
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = open(log, "ab")  # noqa: SIM115 - the child owns it for its whole life
    return subprocess.Popen(
        command, env=dict(env), stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
    )


def stop(procs: list[subprocess.Popen[bytes]], timeout_s: float = 15.0) -> None:
    """SIGTERM every process group (a warm shutdown), then SIGKILL what is left."""
    for proc in procs:
        if proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(timeout=5)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
