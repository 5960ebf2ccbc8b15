"""Start and stop the processes `devloop run` owns: Celery workers and Flower."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from devloop.safe.private import open_private_log

if TYPE_CHECKING:  # a command that reads QUEUE_LIST need not load the supervisor
    from devloop.server.supervisor import Process

QUEUE_LIST = "coder,tester,control"
FLOWER_USER = "devloop"
# Flower's own switches that would open it up or carry a secret: never inherited.
FLOWER_ENV_DROPPED = ("FLOWER_UNAUTHENTICATED_API", "FLOWER_BASIC_AUTH", "DEVLOOP_FLOWER_AUTH")


def worker_args(
    queues: str = QUEUE_LIST,
    concurrency: int = 1,
    name: str = "devloop@%h",
    loglevel: str = "WARNING",
) -> list[str]:
    """`worker ...` with DevLoop's defaults (prefork, events on, no gossip or mingle): what
    follows `celery -A workers.worker_app`, and what the fork server runs (workers/forker.py)."""
    return [
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


def worker_command(args: Sequence[str] | None = None) -> list[str]:
    """`celery -A workers.worker_app worker ...` (worker_args(), by default) as a process of
    its own."""
    return [sys.executable, "-m", "celery", "-A", "workers.worker_app",
            *(worker_args() if args is None else args)]


# The fork server a run's workers start from: their imports paid once per run.
FORKER_COMMAND = [sys.executable, "-m", "workers.forker"]


def flower_command(port: int, address: str = "127.0.0.1") -> list[str]:
    """Flower on the same broker, listening on address:port (credentials come by env), its
    metrics and health check behind them too (workers/flower.py)."""
    return [
        sys.executable,
        "-m",
        "workers.flower",
        "-A",
        "workers.worker_app",
        "flower",
        f"--port={port}",
        f"--address={address}",
    ]


def flower_auth_problem(auth: str) -> str | None:
    """What is wrong with a DEVLOOP_FLOWER_AUTH value (never echoing it), or None."""
    for pair in auth.split(","):
        user, colon, password = pair.partition(":")
        if not colon or not user or not password:
            return "not user:password (several: user:password,user2:password2)"
        if any(ch.isspace() for ch in pair):
            return "holds white space"
    return None


def flower_credentials(configured: str | None) -> tuple[str, bool]:
    """DEVLOOP_FLOWER_AUTH, else a fresh random `devloop:<password>`; and whether it is fresh."""
    if configured:
        return configured, False
    return f"{FLOWER_USER}:{secrets.token_urlsafe(18)}", True


def flower_env(env: Mapping[str, str], auth: str) -> dict[str, str]:
    """Flower's environment: basic auth for its pages and API through FLOWER_BASIC_AUTH.

    By env, not `--basic-auth`: any user on the host can read a command line.
    """
    kept = {k: v for k, v in env.items() if k not in FLOWER_ENV_DROPPED}
    return {**kept, "FLOWER_BASIC_AUTH": auth}


def spawn(command: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child in its own process group, output to a log file (0600, never a link)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    handle = open_private_log(log)
    try:
        return subprocess.Popen(
            command, env=dict(env), stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    finally:
        os.close(handle)


def stop(procs: Sequence[Process], timeout_s: float = 15.0) -> None:
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


def _signal_group(proc: Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
