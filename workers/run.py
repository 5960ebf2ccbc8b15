"""`devloop run`: Redis, workers, (stub, Flower), enqueue, watch, export, stop what it started."""

from __future__ import annotations

import os
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from subprocess import Popen

from rich.console import Console
from rich.live import Live

from devloop.config import Settings, load_settings
from devloop.embedded import redis_endpoint
from devloop.errors import Problem, ProjectInvalid
from devloop.fleet.dispatch import enqueue_project, reconcile
from devloop.fleet.records import export_steps
from devloop.fleet.status import ProjectStatus, project_status
from devloop.project import load_project
from devloop.redis_server import connect
from devloop.store import RedisStore
from workers.app import configure
from workers.dispatch import send
from workers.live import live_view
from workers.procs import flower_command, spawn, stop, worker_command

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


def _problems(options: RunOptions) -> list[Problem]:
    """Input errors to report before anything starts."""
    try:
        load_project(options.project_dir)
    except ProjectInvalid as exc:
        return exc.problems
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


def run_project(options: RunOptions, settings: Settings, console: Console | None = None) -> int:
    """Run the project to the end (or resume it); return the exit code."""
    console = console or Console()
    problems = _problems(options)
    if problems:
        err = Console(stderr=True, highlight=False, soft_wrap=True)
        for problem in problems:
            err.print(str(problem), markup=False)
        return EXIT_INVALID
    project_dir = options.project_dir.resolve()
    state_dir = project_dir / ".devloop"
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
            procs.append(
                spawn(
                    flower_command(options.flower_port),
                    {**env, "FLOWER_UNAUTHENTICATED_API": "true"},
                    state_dir / "flower.log",
                )
            )
            console.print(f"Flower: http://127.0.0.1:{options.flower_port}")
        stack.callback(stop, procs)
        configure(endpoint.celery_url)
        store = RedisStore(connect(endpoint.url), file_cap_bytes=settings.file_cap_bytes)
        stack.callback(store.close)
        report, dispatches = enqueue_project(store, project_dir)
        # Units an earlier, interrupted run left mid-flight have no live task now.
        send(dispatches + reconcile(store, report.pid, grace_s=0))
        final = _watch(store, report.pid, project_dir, options, console, procs)
    if final is None:
        return EXIT_FAILED
    return EXIT_OK if final.all_passed else EXIT_BLOCKED


def _watch(
    store: RedisStore,
    pid: str,
    project_dir: Path,
    options: RunOptions,
    console: Console,
    procs: list[Popen[bytes]],
) -> ProjectStatus | None:
    """Show the live table, export as results land, return the final status (None: gave up)."""
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
            if time.monotonic() - last_reconcile > max(5.0, grace / 2):
                # Tasks lost to a dead worker or a broker restart come back here.
                send(reconcile(store, pid, grace))
                last_reconcile = time.monotonic()
            if all(p.poll() is not None for p in procs):
                console.print("[red]every worker exited; see .devloop/worker-*.log[/red]")
                return None
            if options.timeout_s and time.monotonic() - started > options.timeout_s:
                console.print(f"[red]gave up after {options.timeout_s:.0f} s[/red]")
                return None
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
