"""The fleet's commands, added to the `devloop` CLI: run, enqueue, status, pull, unblock, worker.

They live here, not in devloop/, because they send Celery tasks: imports flow
cli -> workers -> devloop.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated

import typer
from kombu.exceptions import OperationalError

from devloop.artifacts import not_imported
from devloop.cachedir import cache_problem
from devloop.cli import app, err, fail, out
from devloop.config import load_settings
from devloop.embedded import RedisEndpoint, redis_endpoint
from devloop.errors import Problem, ProjectInvalid
from devloop.fleet.control import export_spend, set_default_cap, set_max_usd
from devloop.fleet.dispatch import enqueue_project, reconcile, unblock_unit
from devloop.fleet.marks import forget_llm
from devloop.fleet.records import export_steps
from devloop.fleet.respec import apply_changes
from devloop.fleet.status import project_status
from devloop.ids import id_fault
from devloop.jsonfile import read_json
from devloop.lastrun import Given
from devloop.private import NotPrivate
from devloop.project import load_project
from devloop.redis_server import connect
from devloop.runlock import live_run
from devloop.store import RedisStore
from devloop.suggest import unknown
from workers.children import serve_worker
from workers.live import epilogue, print_status
from workers.procs import (
    QUEUE_LIST,
    flower_auth_problem,
    flower_command,
    flower_env,
    worker_command,
)
from workers.run import options_for, run_project
from workers.runflags import (
    ConsoleHostOpt,
    ConsoleOpt,
    ConsolePortOpt,
    FlowerPortOpt,
    Llm,
    LlmOpt,
    ScriptOpt,
    WorkersOpt,
)

# console, review, cancel, resume: the commands for people in the loop register themselves.
from workers import cli_people  # noqa: F401  isort: skip

PING_S = 1.0  # how long `status` and `unblock` wait for workers to answer


@app.command()
def run(
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
    given = Given(llm, script, workers, console, console_host, console_port, flower,
                  flower_port)
    options = options_for(project_dir, given, timeout_s=timeout, reruns=tuple(rerun or ()),
                          max_usd=max_usd)
    raise typer.Exit(run_project(options, load_settings()))


def _store_for(project: Path) -> tuple[str, Path | None]:
    """The project id of a folder (its units.json), or the argument itself as an id."""
    if (project / "units.json").is_file():
        data, problems = read_json(project / "units.json", "units.json")
        if problems or not isinstance(data, dict) or "project_id" not in data:
            fail(problems or [Problem("units.json", "project_id", "missing", "add it")])
        fault = id_fault(str(data["project_id"]), "project id")
        if fault is not None:
            fail([Problem("units.json", "project_id", *fault)])
        return str(data["project_id"]), project
    if not load_settings().redis_url:
        fail(
            [
                Problem(
                    str(project),
                    "PROJECT",
                    "not a project folder and DEVLOOP_REDIS_URL is unset",
                    "pass the project folder, or set DEVLOOP_REDIS_URL to use an id",
                )
            ]
        )
    fault = id_fault(str(project), "project id")
    if fault is not None:
        fail([Problem(str(project), "PROJECT", *fault)])
    return str(project), None


@app.command()
def enqueue(project_dir: Annotated[Path, typer.Argument(help="The project folder.")]) -> None:
    """Validate and import a project into DEVLOOP_REDIS_URL and queue its ready units."""
    from workers.app import configure
    from workers.dispatch import send

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
    configure(settings.redis_url)
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
    send(dispatches)
    out.print(
        f"{report.pid}: {report.units} units imported; queued "
        f"{', '.join(d.msg.unit_id for d in dispatches) or 'nothing new'}"
    )


def _consumers(endpoint: RedisEndpoint, timeout_s: float = PING_S) -> list[str]:
    """The workers consuming the coder or tester queue on this Redis (Celery's inspect);
    none when this command just started the embedded Redis (no worker can know it)."""
    if endpoint.server is not None:
        return []
    from workers.app import app, configure

    configure(endpoint.celery_url)
    try:
        replies = app.control.inspect(timeout=timeout_s).active_queues() or {}
    except (OSError, OperationalError):
        return []
    return sorted(worker for worker, queues in replies.items()
                  if {q.get("name") for q in queues or []} & {"coder", "tester"})


@app.command()
def status(
    project: Annotated[Path, typer.Argument(help="The project folder (or its id).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    repair: Annotated[bool, typer.Option(help="Re-send units that lost their task.")] = False,
) -> None:
    """Show every unit's status, attempt, tokens, elapsed time, and why it waits or is
    blocked with the commands that move it on; a unit no worker runs shows `interrupted`."""
    pid, folder = _store_for(project)
    settings = load_settings()
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
            from workers.app import configure
            from workers.dispatch import send

            configure(endpoint.celery_url)
            dispatches = reconcile(store, pid, settings.reconcile_grace_s)
            send(dispatches)
            err.print(f"repair: re-sent {len(dispatches)} unit(s)")
        fleet = bool(_consumers(endpoint))
        state = project_status(store, pid, fleet=fleet, folder=str(project) if folder else None,
                               run_live=live_run(folder) if folder else None)
    if as_json:
        print(state.model_dump_json(indent=2))
    else:
        print_status(out, state)
        for line in epilogue(state, str(project), files=False):
            out.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def pull(
    project: Annotated[Path, typer.Argument(help="The project folder (or its id).")],
    dest: Annotated[Path, typer.Argument(help="Where to write the seed layout.")],
) -> None:
    """Write the project's current state from Redis into DEST in the seed layout."""
    pid, folder = _store_for(project)
    with redis_endpoint(folder or Path("."), load_settings()) as endpoint:
        store = RedisStore(connect(endpoint.url))
        # Into the project's own folder it is the sync a run does: it knows what it wrote.
        source = folder is not None and dest.resolve() == folder.resolve()
        written = [*store.export_definition(pid, dest), *store.export(pid, dest, as_source=source),
                   export_steps(store, pid, dest), export_spend(store, pid, dest)]
    out.print(f"{len(written)} files written under {dest}")


@app.command()
def unblock(
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
    from workers.app import configure
    from workers.dispatch import send

    pid, folder = _store_for(project)
    if run_after and folder is None:
        fail([Problem(str(project), "--run", "needs the project folder, not its id",
                      "pass the folder, or start your workers (devloop worker)")])
    with redis_endpoint(folder or Path("."), load_settings()) as endpoint:
        configure(endpoint.celery_url)
        store = RedisStore(connect(endpoint.url))
        known = [u.id for u in store.project_record(pid).units.units] \
            if store.has_project(pid) else []
        if unit not in known:
            fail([unknown(str(project), "UNIT", "unit", unit, known)])
        try:
            dispatches = unblock_unit(store, pid, unit, hint)
        except ValueError as exc:
            fail([Problem(str(project), unit, str(exc), "check `devloop status`")])
        send(dispatches)
        consumers = _consumers(endpoint)
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
        assert folder is not None
        out.print(f"running: devloop run {where}", markup=False)
        options = options_for(folder, Given(llm=llm, workers=workers))
        raise typer.Exit(run_project(options, load_settings()))


@app.command()
def worker(
    queues: Annotated[str, typer.Option(help="Queues to consume.")] = QUEUE_LIST,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency", help="Processes.")] = 1,
    name: Annotated[str, typer.Option("-n", "--name", help="Worker name.")] = "devloop@%h",
) -> None:
    """A Celery worker with DevLoop's defaults, restarted when it dies, stopped warm then hard
    on Ctrl-C, SIGTERM or SIGHUP; needs DEVLOOP_REDIS_URL and ANTHROPIC_API_KEY."""
    if not load_settings().redis_url:
        fail(
            [Problem("DEVLOOP_REDIS_URL", "environment", "not set", "point it at the shared Redis")]
        )
    if (cache := cache_problem(load_settings())) is not None:
        fail([cache])
    command = worker_command(queues, concurrency, name, loglevel="INFO")
    raise typer.Exit(serve_worker(command, dict(os.environ), err))


@app.command("flower")
def flower_service(
    port: Annotated[int, typer.Option(help="Flower's port.")] = 5555,
) -> None:
    """Flower on DEVLOOP_REDIS_URL, on DEVLOOP_FLOWER_ADDRESS, behind DEVLOOP_FLOWER_AUTH."""
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


@app.command()
def demo(
    example: Annotated[str, typer.Option(help="todo (node) or inventory (python).")] = "todo",
    workers: Annotated[int, typer.Option(min=1, max=16, help="Worker processes.")] = 2,
    out_dir: Annotated[Path, typer.Option(help="Where the demo's copy goes.")] = Path("demo-out"),
) -> None:
    """Run a bundled example through the fleet with its scripted model turns."""
    from workers.demo import examples, run_demo

    if example not in examples():
        fail([Problem("--example", "example", f'no example "{example}"',
                      f"use one of {', '.join(examples())}")])
    raise typer.Exit(run_demo(example, workers, load_settings(), out, out_dir))


def main() -> None:
    """Console-script entry point."""
    try:
        app(prog_name="devloop")
    except NotPrivate as exc:  # a .devloop/ that is not this user's alone: the user's to fix
        err.print(str(exc), markup=False)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
