"""A real fleet for tests: Celery workers on the test Redis, forked from a fork server as
`devloop run`'s are (devloop/cli/run/children.py), the stub in-process."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devloop.cli.run.procs import FORKER_COMMAND, stop, worker_args
from devloop.fleet.dispatch import enqueue_project
from devloop.fleet.status import ProjectStatus, project_status
from devloop.llm.stub import StubServer
from devloop.server.forker import Forker
from devloop.server.supervisor import Process
from devloop.store import RedisStore
from workers.celery_queue import CeleryQueue


@dataclass
class Fleet:
    """Running workers and the stub; helpers to wait, kill and inspect."""

    store: RedisStore
    stub: StubServer
    pid: str
    env: dict[str, str]
    logs: Path
    forker: Forker
    workers: list[Process] = field(default_factory=list)
    queue: CeleryQueue = field(default_factory=CeleryQueue)  # on the test's Redis

    def add_worker(self) -> Process:
        """One more worker node (its own process group, its pool processes its children)."""
        n = len(self.workers)
        proc = self.forker.start(worker_args(name=f"t{n}@%h"), self.logs / f"worker-{n}.log")
        self.workers.append(proc)
        return proc

    def status(self) -> ProjectStatus:
        return project_status(self.store, self.pid)

    def wait(self, timeout_s: float = 120) -> ProjectStatus:
        """Poll until every unit is passed or blocked. It does not reconcile: recovery from
        dead workers and lost tasks is tested through `devloop run`, which does."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.status()
            if state.finished:
                return state
            time.sleep(0.2)
        logs = "\n".join(p.read_text()[-3000:] for p in sorted(self.logs.glob("*.log")))
        raise AssertionError(f"fleet did not finish: {self.status()}\n{logs}")

    def kill_worker(self, proc: Process) -> None:
        """SIGKILL a whole worker (main process and its pool children)."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def requests(self, pattern: str) -> list[tuple[str, int]]:
        """(session key, turn) of every answered request whose key contains pattern."""
        return [(r.session_key, r.turn) for r in self.stub.requests
                if pattern in r.session_key and r.status == 200]


@contextmanager
def fleet(store: RedisStore, celery_url: str, project: Path, script: dict[str, Any],
          workers: int = 2, settings_env: dict[str, str] | None = None,
          start: bool = True) -> Iterator[Fleet]:
    """Start workers and the stub, enqueue project (when start), stop everything after."""
    queue = CeleryQueue()
    queue.connect(celery_url)
    with StubServer(script) as stub:
        env = {**os.environ, "DEVLOOP_REDIS_URL": celery_url,
               "ANTHROPIC_BASE_URL": stub.base_url, "ANTHROPIC_API_KEY": "test",
               **(settings_env or {})}
        logs = project.parent / f"{project.name}-logs"
        logs.mkdir(parents=True, exist_ok=True)
        # One fork server pays the workers' imports (Celery, DevLoop, the model SDK) once:
        # started each on its own, a worker and its pool cost 1.5 CPU-s, forked 0.1.
        forker = Forker(FORKER_COMMAND, env, logs / "forker.log")
        handle = Fleet(store, stub, "", env, logs, forker, queue=queue)
        try:
            for _ in range(workers):
                handle.add_worker()
            if start:
                report, dispatches = enqueue_project(store, project)
                handle.pid = report.pid
                queue.send(dispatches)
            yield handle
        finally:
            stop(handle.workers, timeout_s=10)
            forker.close()
