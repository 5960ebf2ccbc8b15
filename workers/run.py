"""`devloop run`: Redis, workers, (stub, Flower), enqueue, watch, export, stop what it started."""

from __future__ import annotations

import os
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

import redis
from kombu.exceptions import OperationalError
from rich.console import Console
from rich.live import Live

from devloop.config import Settings, load_settings
from devloop.embedded import private_state_dir, redis_endpoint
from devloop.errors import DevLoopError, Problem, ProjectInvalid
from devloop.fleet.dispatch import enqueue_project, reconcile, resume_blocked
from devloop.fleet.failures import one_line
from devloop.fleet.records import export_steps
from devloop.fleet.status import ProjectStatus, project_status
from devloop.project import load_project
from devloop.redis_server import connect
from devloop.store import RedisStore
from workers.app import configure
from workers.dispatch import send
from workers.live import live_view
from workers.procs import (
    flower_auth_problem,
    flower_command,
    flower_credentials,
    flower_env,
    spawn,
    stop,
    worker_command,
)

EXIT_OK, EXIT_BLOCKED, EXIT_INVALID, EXIT_FAILED = 0, 1, 2, 3


@dataclass(frozen=True)
class RunOptions:
    """What `devloop run` was asked to do."""

    project_dir: Path
    workers: int = 2
    llm: str = "anthropic"
    script: Path | None = None
    flower: bool = False
    flower_port: int = 5555
    poll_s: float = 0.5
    timeout_s: float | None = None  # give up (exit 3) after this long; tests set it


def _problems(options: RunOptions, settings: Settings) -> list[Problem]:
    """Input errors to report before anything starts."""
    try:
        load_project(options.project_dir)
    except ProjectInvalid as exc:
        return exc.problems
    auth = settings.flower_auth.get_secret_value() if settings.flower_auth else ""
    if options.flower and auth and (why := flower_auth_problem(auth)):
        return [Problem("DEVLOOP_FLOWER_AUTH", "environment", why, "set it to user:password")]
    if options.llm == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        return [
            Problem(
                "ANTHROPIC_API_KEY",
                "environment",
                "not set",
                "export your Anthropic API key, or run with --llm stub --script FILE",
            )
        ]
    if options.llm == "stub":
        script = options.script or options.project_dir / "stub.yaml"
        if not script.is_file():
            return [
                Problem(
                    str(script),
                    "file",
                    "not found",
                    "pass --script FILE with the scripted turns (docs/stub-script.md)",
                )
            ]
        from devloop.llm.stub import Script, ScriptInvalid

        try:
            Script.load(script)
        except ScriptInvalid as exc:
            return exc.problems
    return []


class GaveUp(Exception):
    """The run stops before every unit is done; the message names why (exit 3)."""


def run_project(options: RunOptions, settings: Settings, console: Console | None = None) -> int:
    """Run the project to the end (or resume it); return the exit code.

    0 every unit passed, 1 some unit blocked, 2 bad input, 3 gave up (every worker died,
    the timeout, the environment cannot run sessions, Redis went away): never a traceback.
    """
    console = console or Console()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    problems = _problems(options, settings)
    if problems:
        for problem in problems:
            err.print(str(problem), markup=False)
        return EXIT_INVALID
    try:
        final = _run(options, settings, console)
    except GaveUp as gave_up:
        console.print()  # the live table's last line
        err.print(f"devloop run: gave up: {gave_up}", markup=False)
        return EXIT_FAILED
    except (redis.RedisError, OperationalError) as lost:
        console.print()
        err.print(
            f"devloop run: gave up: Redis went away ({one_line(lost)}); "
            "run `devloop run` again to resume",
            markup=False,
        )
        return EXIT_FAILED
    except (DevLoopError, OSError) as broken:
        err.print(f"devloop run: gave up: {one_line(broken)}", markup=False)
        return EXIT_FAILED
    except Exception as bug:  # a bug of ours: the reason here, the traceback in a file
        log = _write_traceback(options.project_dir)
        err.print(f"devloop run: gave up: unexpected {one_line(bug)} (traceback in {log})",
                  markup=False)
        return EXIT_FAILED
    for row in final.units:
        if row.status == "blocked":
            console.print(f"{row.unit_id}: blocked: {row.blocked_reason or 'see devloop status'}",
                          markup=False, highlight=False)
    return EXIT_OK if final.all_passed else EXIT_BLOCKED


def _write_traceback(project_dir: Path) -> Path:
    """The current exception's traceback in PROJECT/.devloop/run-error.log."""
    log = project_dir.resolve() / ".devloop" / "run-error.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(traceback.format_exc(), encoding="utf-8")
    return log


def _run(options: RunOptions, settings: Settings, console: Console) -> ProjectStatus:
    """Start what the run needs, enqueue (or resume), watch to the end, stop what it started."""
    project_dir = options.project_dir.resolve()
    state_dir = private_state_dir(project_dir)  # 0700: logs, and the embedded Redis
    with ExitStack() as stack:
        endpoint = stack.enter_context(redis_endpoint(project_dir, settings))
        env = {**os.environ, "DEVLOOP_REDIS_URL": endpoint.celery_url}
        if options.llm == "stub":
            from devloop.llm.stub import StubServer

            stub = stack.enter_context(StubServer(options.script or project_dir / "stub.yaml"))
            env.update(ANTHROPIC_BASE_URL=stub.base_url, ANTHROPIC_API_KEY="stub")
        procs = [
            spawn(worker_command(name=f"w{i}@%h"), env, state_dir / f"worker-{i}.log")
            for i in range(options.workers)
        ]
        if options.flower:
            configured = settings.flower_auth.get_secret_value() if settings.flower_auth else None
            auth, fresh = flower_credentials(configured)
            procs.append(
                spawn(
                    flower_command(options.flower_port, settings.flower_address),
                    flower_env(env, auth),
                    state_dir / "flower.log",
                )
            )
            user, _, password = auth.partition(",")[0].partition(":")
            # Printed here once, and nowhere else: Flower gets it by env, its log never shows it.
            secret = f"password {password}" if fresh else "password from DEVLOOP_FLOWER_AUTH"
            console.print(f"Flower: http://{settings.flower_address}:{options.flower_port} "
                          f"(user {user}, {secret})", markup=False, highlight=False)
        stack.callback(stop, procs)
        configure(endpoint.celery_url)
        store = RedisStore(connect(endpoint.url), file_cap_bytes=settings.file_cap_bytes)
        stack.callback(store.close)
        report, dispatches = enqueue_project(store, project_dir)
        # Units an earlier, interrupted run left mid-flight have no live task now, and units
        # it blocked for the model or the infrastructure (not their code) resume.
        send(dispatches + resume_blocked(store, report.pid) + reconcile(store, report.pid, 0))
        return _watch(store, report.pid, project_dir, options, console, procs)


def _watch(
    store: RedisStore,
    pid: str,
    project_dir: Path,
    options: RunOptions,
    console: Console,
    procs: list[Popen[bytes]],
) -> ProjectStatus:
    """Show the live table, export as results land, return the final status (GaveUp: not)."""
    started = last_reconcile = time.monotonic()
    versions: dict[str, int] = {}
    grace = load_settings().reconcile_grace_s
    state = project_status(store, pid)
    with Live(live_view(state), console=console, refresh_per_second=4, transient=False,
              vertical_overflow="visible") as live:
        while True:
            state = project_status(store, pid)
            live.update(live_view(state))
            versions = _export_changes(store, pid, project_dir, versions)
            if state.finished:
                break
            if state.environment_error:
                store.export(pid, project_dir)
                raise GaveUp(f"the environment cannot run sessions: {state.environment_error}")
            if time.monotonic() - last_reconcile > max(5.0, grace / 2):
                # Tasks lost to a dead worker or a broker restart come back here.
                send(reconcile(store, pid, grace))
                last_reconcile = time.monotonic()
            if all(p.poll() is not None for p in procs):
                raise GaveUp("every worker exited; see .devloop/worker-*.log")
            if options.timeout_s and time.monotonic() - started > options.timeout_s:
                raise GaveUp(f"timed out after {options.timeout_s:.0f} s; run again to resume")
            time.sleep(options.poll_s)
    console.print()
    store.export(pid, project_dir, as_source=True)
    export_steps(store, pid, project_dir)
    return state


def _export_changes(
    store: RedisStore, pid: str, project_dir: Path, seen: dict[str, int]
) -> dict[str, int]:
    """Export the project when any unit's files changed since the last look."""
    now = store.unit_versions(pid, [u.id for u in store.project_record(pid).units.units])
    if now != seen:
        store.export(pid, project_dir, as_source=True)
        export_steps(store, pid, project_dir)
    return now
