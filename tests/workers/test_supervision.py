"""`devloop run` supervises what it starts: dead workers and a dead Redis come back, signals
stop it cleanly, and nothing it started outlives it, even when it is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devloop.cli.run.children import CrashLoop, RunChildren
from devloop.cli.run.procs import FORKER_COMMAND, worker_args, worker_command
from devloop.ledgers import parse_coder_log
from devloop.server.forker import Forker
from devloop.server.keeper import RedisKeeper
from devloop.server.redis_server import RedisServer
from devloop.server.supervisor import ChildSpec, Supervisor
from tests.fleet.builder import UnitPlan, build, script
from tests.leftovers import views_of_killed_processes
from tests.proctree import alive, descendants, kill_tree
from tests.workers.runproc import (
    DEVLOOP,
    SLACK_S,
    RunProcess,
    clean_env,
    end,
    kill_worker,
    redis_owner,
)

pytestmark = pytest.mark.timeout(600)


def project(tmp_path: Path, units: int = 4, latency_ms: int = 1500) -> Path:
    """units independent python units whose coder's second turn takes latency_ms."""
    plans = [UnitPlan(f"u{i}", coder_latency_ms={2: latency_ms}) for i in range(units)]
    root = build(tmp_path / "p", plans)
    (root / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    return root


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunProcess]:
    handle = RunProcess(project(tmp_path))
    with views_of_killed_processes():
        yield handle
        handle.close()


def attempts_logged(root: Path) -> dict[str, list[int]]:
    """Each unit's coder.log attempts, as exported into the folder."""
    out = {}
    for log in sorted(root.glob("units/*/coder.log")):
        out[log.parent.name] = [d.attempt for d in parse_coder_log(log.read_text())]
    return out


def test_workers_killed_mid_run_are_restarted_and_the_run_finishes(run: RunProcess) -> None:
    # A killed worker's step is taken over once its lease runs out: a short one here, so
    # the test waits seconds for that, not the default minute.
    run.env.update(DEVLOOP_LEASE_TTL_S="10", DEVLOOP_RECONCILE_GRACE_S="4")
    run.start()
    killed: set[int] = set()
    for _ in range(2):
        run.wait_for("two live workers", lambda: len(run.workers_now()) == 2)
        victim = next(w for w in run.workers_now() if w.pid not in killed)
        killed.add(victim.pid)
        kill_worker(victim)
        run.wait_for("a replacement worker", lambda: len(
            [w for w in run.workers_now() if w.pid not in killed]) == 2)
    assert run.wait(300) == 0, run.output()
    assert "restarted" in run.output()
    assert all(a == [1] for a in attempts_logged(run.project).values())


def test_the_embedded_redis_killed_mid_run_is_restarted_and_the_run_finishes(
    run: RunProcess,
) -> None:
    run.start()
    # Mid-run: a coder's commit has been exported, other sessions are under way.
    run.wait_for("a committed unit", lambda: any(run.project.glob("units/*/code/unit.py")))
    first = run.redis_now()
    assert first is not None
    os.kill(first.pid, signal.SIGKILL)
    code = run.wait(300)
    assert code == 0, run.output()
    assert "Traceback" not in run.output()
    assert "Redis died and was restarted from its AOF" in run.output()
    assert all(a == [1] for a in attempts_logged(run.project).values())


def test_a_run_on_another_commands_redis_adopts_it_when_that_command_ends(
    run: RunProcess,
) -> None:
    with redis_owner(run.project) as owner:  # as a console opened before the run
        run.start()
        run.wait_for("a committed unit", lambda: any(run.project.glob("units/*/code/unit.py")))
        end(owner)  # mid-run
        code = run.wait(300)
        assert code == 0, run.output()
        assert "Traceback" not in run.output()
        assert "Redis was stopped by the command that started it, and started again here" in (
            run.output())
        assert all(a == [1] for a in attempts_logged(run.project).values())
    # The run stopped the server it adopted, and its records with it.
    assert not (run.project / ".devloop" / "redis.sock").exists()
    assert not (run.project / ".devloop" / "redis.url").exists()


def test_each_signal_stops_everything_and_the_next_run_resumes(tmp_path: Path) -> None:
    # SIGTERM, SIGHUP and SIGINT in turn, each mid-run, each run started again on the same
    # folder: a 3 s model turn keeps every session of an interrupted run from finishing.
    run = RunProcess(project(tmp_path, latency_ms=3000))
    with views_of_killed_processes():
        try:
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                run.start()
                run.wait_for("two live workers", lambda: len(run.workers_now()) == 2)
                time.sleep(2)  # sessions under way
                started = [p.pid for p in run.children()]
                run.signal(sig)
                assert run.wait(60) == 128 + sig, run.output()
                said = run.err.read_text()
                assert "interrupted: " in said and "again to resume" in said, said
                deadline = time.monotonic() + SLACK_S
                while any(alive(pid) for pid in started) and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert not [pid for pid in started if alive(pid)], f"{sig!r}: a process outlived it"
            assert run.start().wait(300) == 0, run.output()
        finally:
            run.close()
    logged = attempts_logged(run.project)
    assert sorted(logged) == ["u0", "u1", "u2", "u3"]
    assert all(a == [1] for a in logged.values()), logged  # nothing committed twice


@pytest.mark.parametrize("after_s", [0.2, 0.7, 1.5])
def test_a_sigterm_at_any_moment_of_start_up_ends_in_143_with_nothing_left(
    run: RunProcess, after_s: float
) -> None:
    # Importing, starting Redis, the workers, the first sends: an interrupt may land in
    # any of them (mid-import, Python even wraps it into another error).
    run.start()
    seen: set[int] = set()
    deadline = time.monotonic() + after_s
    while time.monotonic() < deadline:
        seen |= {p.pid for p in run.children()}
        time.sleep(0.02)
    run.signal(signal.SIGTERM)
    code = run.wait(60)
    if code == -signal.SIGTERM:
        # Still importing, before it owned anything: Python's own handler ended it.
        assert not seen, run.output()
    else:
        assert code == 128 + signal.SIGTERM, run.output()
        assert "interrupted" in run.err.read_text()
    assert "Traceback" not in run.output()
    deadline = time.monotonic() + SLACK_S
    while any(alive(pid) for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in seen if alive(pid)], "a process of the run outlived it"


def test_everything_the_run_started_dies_with_it_on_sigkill(run: RunProcess) -> None:
    run.start()
    run.wait_for("two live workers and Redis",
                 lambda: len(run.workers_now()) == 2 and run.redis_now() is not None)
    time.sleep(1)
    started = [p.pid for p in run.children()]
    assert len(started) >= 3
    run.signal(signal.SIGKILL)
    run.wait(30)
    deadline = time.monotonic() + SLACK_S
    while any(alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in started if alive(pid)], "a child outlived a SIGKILLed run"


def test_devloop_worker_stops_warm_on_sighup_and_leaves_nothing(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    env = clean_env(DEVLOOP_REDIS_URL=redis_server.celery_url)
    with open(tmp_path / "worker.out", "wb") as out:
        proc = subprocess.Popen([DEVLOOP, "worker", "-c", "1"], stdout=out,
                                stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not [p for p in descendants(proc.pid) if "celery" in p.cmdline]:
            assert time.monotonic() < deadline, (tmp_path / "worker.out").read_text()
            time.sleep(0.1)
        time.sleep(1)
        below = [p.pid for p in descendants(proc.pid)]
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=60) == 128 + signal.SIGHUP
        deadline = time.monotonic() + SLACK_S
        while any(alive(pid) for pid in below) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in below if alive(pid)]
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait(timeout=30)


@pytest.mark.parametrize("forked", [False, True], ids=["own process", "forked"])
def test_a_worker_that_keeps_dying_is_a_crash_loop_named_with_its_last_log_lines(
    tmp_path: Path, forked: bool
) -> None:
    # A `celery` that cannot be imported shadows the real one in the workers' environment
    # (`python -m celery`, or the fork server's imports; PYTHONPATH comes before site-packages).
    fake = tmp_path / "fake"
    (fake / "celery").mkdir(parents=True)
    (fake / "celery/__init__.py").write_text("raise ImportError('this worker cannot start')\n")
    env = {**os.environ, "PYTHONPATH": str(fake)}
    forker = Forker(FORKER_COMMAND, env, tmp_path / "forker.log") if forked else None
    children = RunChildren(Supervisor(backoff_s=0.1, backoff_cap_s=0.2, crash_restarts=3,
                                      forker=forker), RedisKeeper(None))
    spec = ChildSpec("worker-0", worker_command(), env, tmp_path / "worker-0.log",
                     fork_args=tuple(worker_args()))
    children.workers.append(children.supervisor.add(spec))
    try:
        deadline = time.monotonic() + 120
        with pytest.raises(CrashLoop) as caught:
            while time.monotonic() < deadline:
                children.check()
                time.sleep(0.05)
        message = str(caught.value)
        assert message.startswith("worker-0 died 4 times in 60 s (last: exit status 1)")
        assert "ImportError: this worker cannot start" in message  # its own last words
        assert children.workers[0].restarts == 3
    finally:
        children.stop()
