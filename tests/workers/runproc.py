"""`devloop run` as a user starts it, in a process of its own that a test can signal and kill."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.proctree import Proc, descendants, kill_tree

DEVLOOP = str(Path(sys.executable).parent / "devloop")
SLACK_S = 30.0  # for waits a loaded machine may stretch


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without Redis or model settings, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    return {**env, "COLUMNS": "200", **extra}


@dataclass
class RunProcess:
    """One `devloop run DIR --llm stub` (or other args, a stub the test runs, or `devloop
    resume`) and its output."""

    project: Path
    workers: int = 2
    env: dict[str, str] = field(default_factory=clean_env)
    llm: str = "stub"  # "anthropic" with ANTHROPIC_BASE_URL in env: a stub the test runs
    proc: subprocess.Popen[bytes] | None = None
    runs: int = 0
    args: list[str] = field(default_factory=list)  # after DIR and --llm
    command: str = "run"  # or "resume"

    @property
    def out(self) -> Path:
        return self.project.parent / f"{self.project.name}-run{self.runs}.out"

    @property
    def err(self) -> Path:
        return self.project.parent / f"{self.project.name}-run{self.runs}.err"

    def start(self) -> RunProcess:
        """Start (or start again) the run."""
        self.runs += 1
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [DEVLOOP, self.command, str(self.project), "--llm", self.llm, *self.args,
                 "--workers", str(self.workers)],
                stdout=out, stderr=err, env=self.env,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait(self, timeout_s: float) -> int:
        """The exit code, once it ends within timeout_s (AssertionError with its output if not)."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"devloop run still running after {timeout_s} s:\n"
                                 + self.output()) from None

    def output(self) -> str:
        return self.out.read_text(errors="replace") + self.err.read_text(errors="replace")

    def children(self) -> list[Proc]:
        """Everything below the run, alive now."""
        return descendants(self.pid) if self.proc and self.proc.poll() is None else []

    def workers_now(self) -> list[Proc]:
        """The run's Celery worker main processes (not their pool processes): its own
        `celery worker` children (one worker), or the children of its fork server."""
        below = self.children()
        mine = [p for p in below if p.ppid == self.pid]
        forkers = {p.pid for p in mine if "workers.forker" in p.cmdline}
        return [p for p in below if p.ppid in forkers
                or (p.ppid == self.pid and "celery" in p.cmdline and " worker " in p.cmdline)]

    def redis_now(self) -> Proc | None:
        """The embedded server (a Valkey build titles itself valkey-server)."""
        return next((p for p in self.children()
                     if any(name in p.cmdline for name in ("redis-server", "valkey-server"))),
                    None)

    def wait_for(self, what: str, check: object, timeout_s: float = 120) -> None:
        """Poll check() until it is true; AssertionError naming `what` (and the output)."""
        deadline = time.monotonic() + timeout_s
        while not check():  # type: ignore[operator]
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"the run ended before {what}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {timeout_s} s:\n{self.output()}")
            time.sleep(0.1)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def close(self) -> None:
        """Kill whatever is left of the run (a failed test must not leave it behind)."""
        if self.proc is not None and self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait(timeout=30)


def kill_worker(proc: Proc) -> None:
    """SIGKILL a worker's main process and its pool processes, as the OOM killer might."""
    for child in [proc, *descendants(proc.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGKILL)


# A command that starts the project's embedded Redis and owns it until its stdin closes.
_OWNER = """import sys
from pathlib import Path
from devloop.core.config import Settings
from devloop.server.embedded import redis_endpoint
with redis_endpoint(Path(sys.argv[1]), Settings(redis_url=None)):
    print("up", flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def redis_owner(project: Path) -> Iterator[subprocess.Popen[str]]:
    """Another command owning PROJECT's embedded Redis (as a console opened first, or a run);
    close its stdin to end it, which stops its server. Killed at the end if still alive."""
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, str(project)], env=clean_env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None and owner.stdout.readline() == "up\n"
        yield owner
    finally:
        if owner.poll() is None:
            owner.kill()
        owner.wait(30)


def end(owner: subprocess.Popen[str]) -> None:
    """End the owner as its user would: it stops its server and lets go of the files."""
    assert owner.stdin is not None
    owner.stdin.close()
    assert owner.wait(60) == 0
