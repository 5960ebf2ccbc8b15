"""What `devloop run` starts and keeps running: its workers, Flower, and its Redis.

A worker that dies is restarted after a growing backoff; one that keeps dying stops the
run with its last log lines. The embedded Redis, when this run started it, is restarted on
the same socket from its AOF. Everything dies with the run, even when it is SIGKILLed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console

from devloop.cli.run.procs import (
    FORKER_COMMAND,
    flower_command,
    flower_credentials,
    flower_env,
    worker_args,
    worker_command,
)
from devloop.core.config import Settings
from devloop.core.errors import DevLoopError
from devloop.server.embedded import RedisEndpoint
from devloop.server.forker import Forker
from devloop.server.keeper import RedisKeeper
from devloop.server.supervisor import Child, ChildSpec, Interrupted, Supervisor, interrupt_on


class CrashLoop(DevLoopError):
    """A child of the run keeps dying; the message names it and ends with its last log lines."""


@dataclass
class RunChildren:
    """The run's supervised children and its Redis keeper."""

    supervisor: Supervisor
    redis: RedisKeeper
    workers: list[Child] = field(default_factory=list)
    note: str | None = None  # the last thing worth a line in the live view

    def check(self) -> None:
        """Restart what died (Redis first: the workers need it); CrashLoop when one keeps
        dying, RedisServerError when Redis cannot be started again."""
        self.note = self.redis.check() or self.note
        for event in self.supervisor.poll():
            if event.kind == "crash_loop":
                raise CrashLoop(
                    f"{event.detail}; the last lines of {event.child.spec.log}:\n"
                    + event.child.log_tail()
                )
            if event.kind == "exited":
                self.note = f"{event.child.spec.name} {event.detail}; restarting it"
            elif event.kind == "restarted":
                self.note = f"{event.child.spec.name} restarted ({event.detail})"

    def summary(self) -> str:
        """One line for the live view: workers up, restarts, Redis restarts."""
        up = sum(w.alive for w in self.workers)
        restarts = [f"{w.spec.name} x{w.restarts}" for w in self.workers if w.restarts]
        line = f"workers: {up}/{len(self.workers)} up"
        if restarts:
            line += f", restarted {', '.join(restarts)}"
        if self.redis.restarts:
            line += f"; Redis restarted x{self.redis.restarts}"
        return line + (f" | {self.note}" if self.note else "")

    def stop(self) -> None:
        """Warm stop (SIGTERM, so a worker finishes its turn's bookkeeping), then SIGKILL;
        then a Redis the run adopted (after its workers: they need it to stop warm)."""
        try:
            self.supervisor.stop()
        finally:
            self.redis.close()


def start_children(
    workers: int,
    env: dict[str, str],
    endpoint: RedisEndpoint,
    state_dir: Path,
    settings: Settings,
    console: Console,
    flower_port: int | None = None,
) -> RunChildren:
    """Start `workers` Celery workers (and Flower when a port is given) under a supervisor,
    forked from one fork server, which pays their imports once."""
    # One worker too: the server imports with the collector paused and freezes what it
    # imported, so a forked worker and its pool start cheaper than one started on its own
    # (one stub unit, the whole run, measured: 2.35 CPU-s against 2.6; two workers 2.45
    # against 3.25).
    forker = Forker(FORKER_COMMAND, env, state_dir / "forker.log")
    children = RunChildren(Supervisor(forker=forker), RedisKeeper.of(endpoint))
    for i in range(workers):
        args = worker_args(name=f"w{i}@%h")
        spec = ChildSpec(f"worker-{i}", worker_command(args), env,
                         state_dir / f"worker-{i}.log", fork_args=tuple(args))
        children.workers.append(children.supervisor.add(spec))
    if flower_port is not None:
        configured = settings.flower_auth.get_secret_value() if settings.flower_auth else None
        auth, fresh = flower_credentials(configured)
        children.supervisor.add(
            ChildSpec("flower", flower_command(flower_port, settings.flower_address),
                      flower_env(env, auth), state_dir / "flower.log")
        )
        user, _, password = auth.partition(",")[0].partition(":")
        # Printed here once, and nowhere else: Flower gets it by env, its log never shows it.
        secret = f"password {password}" if fresh else "password from DEVLOOP_FLOWER_AUTH"
        console.print(f"Flower: http://{settings.flower_address}:{flower_port} "
                      f"(user {user}, {secret})", markup=False, highlight=False)
    return children


def serve_worker(command: list[str], env: dict[str, str], err: Console) -> int:
    """Run one Celery worker in the foreground until a signal (`devloop worker`): restarted
    when it dies, stopped warm then hard on Ctrl-C, SIGTERM or SIGHUP; the exit code."""
    supervisor = Supervisor()
    try:
        with interrupt_on():
            supervisor.add(ChildSpec("worker", command, env, None))
            while True:
                for event in supervisor.poll():
                    err.print(f"devloop worker: {event.detail}", markup=False, highlight=False)
                    if event.kind == "crash_loop":
                        return 3
                time.sleep(0.5)
    except Interrupted as stopped:
        return stopped.exit_code
    finally:
        supervisor.stop()
