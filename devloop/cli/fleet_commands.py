"""The fleet's commands: run, enqueue, status, pull, unblock, worker, flower, demo.

They send steps through the task queue the entry point installed (taskqueue.py), so
nothing here imports Celery. What a command needs beyond the store it imports in its body:
every command pays for this module's imports, and `status` needs neither the run's
machinery nor the dispatch, the roles or the runners (a quarter of its CPU: 0.66 -> 0.50 s).
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from devloop.cli.project_arg import store_for
from devloop.cli.run.flags import (
    ConsoleHostOpt,
    ConsoleOpt,
    ConsolePortOpt,
    FlowerPortOpt,
    Llm,
    LlmOpt,
    ScriptOpt,
    WorkersOpt,
)
from devloop.cli.run.procs import QUEUE_LIST
from devloop.cli.taskqueue import queue_of
from devloop.cli.terminal import err, fail, out
from devloop.core.config import Settings, load_settings
from devloop.core.errors import Problem, ProjectInvalid
from devloop.fleet.queue import QueueUnreachable, TaskQueue
from devloop.project.lastrun import Given
from devloop.project.runlock import live_run
from devloop.server.embedded import RedisEndpoint, redis_endpoint
from devloop.server.redis_server import connect
from devloop.store import RedisStore
from devloop.store.base import StoreUnavailable

if TYPE_CHECKING:
    from devloop.fleet.status import ProjectStatus

commands = typer.Typer()  # devloop/cli/commands.py adds them to the CLI
PING_S = 1.0  # how long `status` and `unblock` wait for workers to answer
STATUS_LOOKS = 3  # a run that ends mid-look takes its Redis along: status looks again


@commands.command()
def run(
    ctx: typer.Context,
    project_dir: Annotated[Path, typer.Argument(help="The project folder.")],
    workers: WorkersOpt = None,
    llm: LlmOpt = None,
    script: ScriptOpt = None,
    flower: Annotated[
        bool | None,
        typer.Option(help="Start Flower on the same broker (DEVLOOP_FLOWER_ADDRESS, basic auth).")
    ] = None,
    flower_port: FlowerPortOpt = None,
    timeout: Annotated[
        float | None, typer.Option(min=1, help="Give up (exit 3) after this many seconds.")
    ] = None,
    rerun: Annotated[
        list[str] | None,
        typer.Option(help="Run this passed or blocked unit again as a fresh attempt "
                     "(repeat for more units)."),
    ] = None,
    max_usd: Annotated[
        float | None,
        typer.Option(min=0.000001, help="The project's spend cap in dollars (else "
                     "DEVLOOP_PROJECT_MAX_USD): reached, the run ends paused (exit 4)."),
    ] = None,
    console: ConsoleOpt = None,
    console_host: ConsoleHostOpt = None,
    console_port: ConsolePortOpt = None,
) -> None:
    """Run a whole project through the fleet: exit 0 all passed, 1 any blocked, 2 bad input,
    3 gave up (every worker died, --timeout, the environment cannot run sessions, Redis
    went away), 4 paused by its budget, 5 cancelled. A passed unit whose spec.json or SDD
    section changed runs again. An option not given is the folder's last run's."""
    from devloop.cli.run.project_run import options_for, run_project

    given = Given(llm, script, workers, console, console_host, console_port, flower,
                  flower_port)
    options = options_for(project_dir, given, timeout_s=timeout, reruns=tuple(rerun or ()),
                          max_usd=max_usd)
    raise typer.Exit(run_project(options, load_settings(), queue_of(ctx)))


@commands.command()
def enqueue(
    ctx: typer.Context,
    project_dir: Annotated[Path, typer.Argument(help="The project folder.")],
) -> None:
    """Validate and import a project into DEVLOOP_REDIS_URL and queue its ready units."""
    from devloop.core.artifacts import not_imported
    from devloop.fleet.control import set_default_cap, set_max_usd
    from devloop.fleet.dispatch import enqueue_project
    from devloop.fleet.marks import forget_llm
    from devloop.fleet.respec import apply_changes
    from devloop.project.load import load_project

    queue = queue_of(ctx)
    settings = load_settings()
    if not settings.redis_url:
        fail(
            [
                Problem(
                    "DEVLOOP_REDIS_URL",
                    "environment",
                    "not set",
                    "point it at the Redis "
                    "your workers use (or run `devloop run DIR`, which starts its own)",
                )
            ]
        )
    queue.connect(settings.redis_url)
    store = RedisStore(connect(settings.redis_url))
    try:
        report, dispatches = enqueue_project(store, project_dir)
    except ProjectInvalid as exc:
        fail(exc.problems)
    for left in report.dropped:
        out.print(not_imported(left), markup=False, highlight=False)
    forget_llm(store, report.pid)  # the workers' model is theirs: no decision is marked scripted
    # The workers keep the project's cap: DEVLOOP_PROJECT_MAX_USD when given, else the default.
    if (cap := settings.given_project_cap()) is not None:
        set_max_usd(store, report.pid, cap)
    else:
        set_default_cap(store, report.pid, settings.project_max_usd)
    reruns, lines = apply_changes(store, load_project(project_dir), str(project_dir))
    for line in lines:
        out.print(line, markup=False, highlight=False)
    dispatches += reruns
    queue.send(dispatches)
    out.print(
        f"{report.pid}: {report.units} units imported; queued "
        f"{', '.join(d.msg.unit_id for d in dispatches) or 'nothing new'}"
    )


def _consumers(queue: TaskQueue, endpoint: RedisEndpoint, timeout_s: float = PING_S) -> list[str]:
    """The workers consuming the coder or tester queue on this Redis (they answer the
    queue's ping); none when this command just started the embedded Redis (no worker can
    know it)."""
    if endpoint.server is not None:
        return []
    queue.connect(endpoint.celery_url)
    try:
        replies = queue.consumers(timeout_s)
    except QueueUnreachable:
        return []
    return sorted(worker for worker, names in replies.items() if set(names) & {"coder", "tester"})


@commands.command()
def status(
    ctx: typer.Context,
    project: Annotated[Path, typer.Argument(help="The project folder (or its id).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    repair: Annotated[bool, typer.Option(help="Re-send units that lost their task.")] = False,
) -> None:
    """Show every unit's status, attempt, tokens, elapsed time, and why it waits or is
    blocked with the commands that move it on; a unit no worker runs shows `interrupted`."""
    from devloop.cli.run.live_view import epilogue, print_status

    pid, folder = store_for(project)
    settings = load_settings()
    for look in range(1, STATUS_LOOKS + 1):
        try:
            state = _read_status(queue_of(ctx), project, pid, folder, settings, repair)
            break
        except (StoreUnavailable, QueueUnreachable):
            # The live run this look found ended under it, its Redis with it: look again, at
            # the folder's own data. Not while the run lives (its Redis is being restarted:
            # a second server on its files must never start), nor for a configured Redis.
            if (look == STATUS_LOOKS or folder is None or settings.redis_url
                    or live_run(folder) is not None):
                raise
            time.sleep(0.5)
    if as_json:
        print(state.model_dump_json(indent=2))
    else:
        print_status(out, state)
        for line in epilogue(state, str(project), files=False):
            out.print(line, markup=False, highlight=False, soft_wrap=True)


def _read_status(queue: TaskQueue, project: Path, pid: str, folder: Path | None,
                 settings: Settings, repair: bool) -> ProjectStatus:
    """One look at the project: its live run's Redis, else its folder's, else the configured."""
    from devloop.fleet.status import project_status

    with redis_endpoint(folder or Path("."), settings) as endpoint:
        store = RedisStore(connect(endpoint.url))
        if not store.has_project(pid):
            fail(
                [
                    Problem(
                        str(project),
                        "project",
                        f'"{pid}" was never enqueued here',
                        "run `devloop run` or `devloop enqueue` first",
                    )
                ]
            )
        if repair:
            from devloop.fleet.dispatch import reconcile

            queue.connect(endpoint.celery_url)
            dispatches = reconcile(store, pid, settings.reconcile_grace_s)
            queue.send(dispatches)
            err.print(f"repair: re-sent {len(dispatches)} unit(s)")
        fleet = bool(_consumers(queue, endpoint))
        return project_status(store, pid, fleet=fleet, folder=str(project) if folder else None,
                              run_live=live_run(folder) if folder else None)


@commands.command()
def pull(
    project: Annotated[Path, typer.Argument(help="The project folder (or its id).")],
    dest: Annotated[Path, typer.Argument(help="Where to write the seed layout.")],
) -> None:
    """Write the project's current state from Redis into DEST in the seed layout."""
    from devloop.fleet.control import export_spend
    from devloop.fleet.records import export_steps

    pid, folder = store_for(project)
    with redis_endpoint(folder or Path("."), load_settings()) as endpoint:
        store = RedisStore(connect(endpoint.url))
        # Into the project's own folder it is the sync a run does: it knows what it wrote.
        source = folder is not None and dest.resolve() == folder.resolve()
        written = [*store.export_definition(pid, dest), *store.export(pid, dest, as_source=source),
                   export_steps(store, pid, dest), export_spend(store, pid, dest)]
    out.print(f"{len(written)} files written under {dest}")


@commands.command()
def unblock(
    ctx: typer.Context,
    project: Annotated[Path, typer.Argument(help="The project folder (or its id).")],
    unit: Annotated[str, typer.Argument(help="The blocked unit.")],
    hint: Annotated[
        str | None,
        typer.Option(help="What the coder should know this time (a fresh attempt); optional "
                     "for a unit blocked by the model or the infrastructure, which resumes."),
    ] = None,
    run_after: Annotated[
        bool,
        typer.Option("--run", help="Then run the project (devloop run DIR) when no worker "
                     "consumes its queues."),
    ] = False,
    llm: Annotated[
        Llm | None, typer.Option(help="With --run: Claude or the stub (default: the last run's).")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, max=64, help="With --run: workers (default: the last "
                                 "run's).")
    ] = None,
) -> None:
    """Re-queue a blocked unit: with a human's hint, or resume one the model or the
    infrastructure blocked; say whether a worker will pick it up."""
    from devloop.core.suggest import unknown
    from devloop.fleet.dispatch import unblock_unit

    queue = queue_of(ctx)
    pid, folder = store_for(project)
    if run_after and folder is None:
        fail([Problem(str(project), "--run", "needs the project folder, not its id",
                      "pass the folder, or start your workers (devloop worker)")])
    with redis_endpoint(folder or Path("."), load_settings()) as endpoint:
        queue.connect(endpoint.celery_url)
        store = RedisStore(connect(endpoint.url))
        known = [u.id for u in store.project_record(pid).units.units] \
            if store.has_project(pid) else []
        if unit not in known:
            fail([unknown(str(project), "UNIT", "unit", unit, known)])
        try:
            dispatches = unblock_unit(store, pid, unit, hint)
        except ValueError as exc:
            fail([Problem(str(project), unit, str(exc), "check `devloop status`")])
        queue.send(dispatches)
        consumers = _consumers(queue, endpoint)
    how = "with your hint" if hint else "where it stopped"
    out.print(f"{unit}: re-queued as attempt {dispatches[0].msg.attempt} {how}", markup=False)
    where = shlex.quote(str(project))
    if consumers:
        out.print(f"{len(consumers)} worker(s) consume this project's queues "
                  f"({', '.join(consumers)}): it starts when one is free", markup=False)
    elif not run_after:
        out.print(f"no worker consumes this project's queues, so nothing runs it yet: "
                  f"`devloop run {where}` picks it up (or unblock with --run)", markup=False)
    if run_after and not consumers:
        from devloop.cli.run.project_run import options_for, run_project

        assert folder is not None
        out.print(f"running: devloop run {where}", markup=False)
        options = options_for(folder, Given(llm=llm, workers=workers))
        raise typer.Exit(run_project(options, load_settings(), queue))


@commands.command()
def worker(
    queues: Annotated[str, typer.Option(help="Queues to consume.")] = QUEUE_LIST,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency", help="Processes.")] = 1,
    name: Annotated[str, typer.Option("-n", "--name", help="Worker name.")] = "devloop@%h",
) -> None:
    """A Celery worker with DevLoop's defaults, restarted when it dies, stopped warm then hard
    on Ctrl-C, SIGTERM or SIGHUP; needs DEVLOOP_REDIS_URL and ANTHROPIC_API_KEY."""
    from devloop.cli.run.children import serve_worker
    from devloop.cli.run.procs import worker_args, worker_command
    from devloop.safe.cachedir import cache_problem

    if not load_settings().redis_url:
        fail(
            [Problem("DEVLOOP_REDIS_URL", "environment", "not set", "point it at the shared Redis")]
        )
    if (cache := cache_problem(load_settings())) is not None:
        fail([cache])
    command = worker_command(worker_args(queues, concurrency, name, loglevel="INFO"))
    raise typer.Exit(serve_worker(command, dict(os.environ), err))


@commands.command("flower")
def flower_service(
    port: Annotated[int, typer.Option(help="Flower's port.")] = 5555,
) -> None:
    """Flower on DEVLOOP_REDIS_URL, on DEVLOOP_FLOWER_ADDRESS, behind DEVLOOP_FLOWER_AUTH."""
    from devloop.cli.run.procs import flower_auth_problem, flower_command, flower_env

    settings = load_settings()
    if not settings.redis_url:
        fail([Problem("DEVLOOP_REDIS_URL", "environment", "not set", "point it at the broker")])
    auth = settings.flower_auth.get_secret_value() if settings.flower_auth else ""
    why = flower_auth_problem(auth) if auth else "not set"
    if why:
        fail([Problem("DEVLOOP_FLOWER_AUTH", "environment", why,
                      "set it to user:password; Flower's pages and API ask for it")])
    command = flower_command(port, settings.flower_address)
    os.execve(command[0], command, flower_env(os.environ, auth))


@commands.command()
def demo(
    ctx: typer.Context,
    example: Annotated[str, typer.Option(help="todo (node) or inventory (python).")] = "todo",
    workers: Annotated[int, typer.Option(min=1, max=16, help="Worker processes.")] = 2,
    out_dir: Annotated[Path, typer.Option(help="Where the demo's copy goes.")] = Path("demo-out"),
) -> None:
    """Run a bundled example through the fleet with its scripted model turns."""
    from devloop.cli.run.demo import examples, run_demo

    if example not in examples():
        fail([Problem("--example", "example", f'no example "{example}"',
                      f"use one of {', '.join(examples())}")])
    raise typer.Exit(run_demo(example, workers, load_settings(), out, out_dir, queue_of(ctx)))

