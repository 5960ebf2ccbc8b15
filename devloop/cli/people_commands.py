"""The commands for people in the loop: console, review, cancel, resume (reset is
reset_command.py's)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from devloop.cli.project_arg import store_for
from devloop.cli.run.flags import ConsoleOpt, ConsolePortOpt, LlmOpt, ScriptOpt, WorkersOpt
from devloop.cli.taskqueue import queue_of
from devloop.cli.terminal import fail, out
from devloop.core.config import load_settings
from devloop.core.errors import Problem
from devloop.server.embedded import redis_endpoint
from devloop.server.redis_server import connect
from devloop.store import RedisStore

commands = typer.Typer()  # devloop/cli/commands.py adds them to the CLI


@commands.command("console")
def console_command(
    ctx: typer.Context,
    project: Annotated[
        Path | None, typer.Argument(help="The project folder (or its id); all projects of "
                                    "DEVLOOP_REDIS_URL when omitted.")
    ] = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int | None, typer.Option(help="Port to listen on (default DEVLOOP_CONSOLE_PORT, 8765; "
                                 "a free one when that is taken).", min=1, max=65535)
    ] = None,
    fd: Annotated[
        list[int] | None, typer.Option(hidden=True, help="Listening sockets handed down by "
                                       "`devloop run` (it bound them and printed the link).")
    ] = None,
) -> None:
    """The live console: the unit DAG, live test output, who needs a human, review, budget
    and cancel; behind a token printed in the link at start."""
    from devloop.cli.run.people import webhook_settings_problem
    from devloop.cli.run.serve_console import bind_console, serve_console
    from devloop.console.listen import ListenFailed
    from devloop.server.supervisor import Interrupted, interrupt_on

    settings = load_settings()
    pid, folder = store_for(project) if project is not None else (None, None)
    if project is None and not settings.redis_url:
        fail([Problem("DEVLOOP_REDIS_URL", "environment", "not set",
                      "pass the project folder, or point it at the Redis your workers use")])
    if pid is not None and (webhook := webhook_settings_problem(settings)) is not None:
        fail([webhook])
    try:  # bound before anything starts: a link is printed only for a socket of ours
        sockets, bound = bind_console(host, port, fd or [], settings, out)
    except ListenFailed as refused:
        fail([refused.problem])
    # Standalone, it keeps the project's Redis (a run's, adopted when the run ends); under
    # `devloop run` (sockets handed down), the run keeps it and the console ends with it.
    # A SIGTERM or SIGHUP stops it as Ctrl-C does, its clean-up run (uvicorn re-raises the
    # signal it caught once it has stopped; by default SIGTERM would skip every finally).
    with interrupt_on():
        try:
            serve_console(pid, folder, host, sockets, bound, settings, out, queue_of(ctx),
                          keep_redis=not fd)
        except Interrupted as stopped:
            raise typer.Exit(128 + stopped.signum) from None


@commands.command()
def review(
    ctx: typer.Context,
    project: Annotated[Path, typer.Argument(help="The project folder (or its id).")],
    unit: Annotated[str, typer.Argument(help="The unit waiting for review.")],
    approve: Annotated[bool, typer.Option("--approve", help="The unit passes.")] = False,
    changes: Annotated[
        str | None, typer.Option(help="Ask for changes: the coder retries with this note.")
    ] = None,
) -> None:
    """Approve a unit waiting in review (it passes and releases its dependents), or ask for
    changes (a coder retry with your note)."""
    queue = queue_of(ctx)
    if approve == (changes is not None):
        fail([Problem("devloop review", "--approve/--changes", "give exactly one",
                      'pass --approve, or --changes "what should change"')])
    from devloop.fleet.review import approve_unit, request_changes_unit

    pid, folder = store_for(project)
    with redis_endpoint(folder or Path("."), load_settings()) as endpoint:
        queue.connect(endpoint.celery_url)
        store = RedisStore(connect(endpoint.url))
        try:
            if approve:
                dispatches = approve_unit(store, pid, unit, "devloop review")
            else:
                dispatches = request_changes_unit(store, pid, unit, changes or "", "devloop review")
        except ValueError as exc:  # ReviewRefused among them
            fail([Problem(str(project), unit, str(exc), "check `devloop status`")])
        queue.send(dispatches)
    if approve:
        released = ", ".join(d.msg.unit_id for d in dispatches) or "nothing new"
        out.print(f"{unit}: approved; released {released}")
    else:
        out.print(f"{unit}: changes requested; the coder retries as attempt "
                  f"{dispatches[0].msg.attempt}")


@commands.command()
def cancel(
    ctx: typer.Context,
    project: Annotated[Path, typer.Argument(help="The project folder (or its id).")],
    unit: Annotated[str | None, typer.Argument(help="Only this unit.")] = None,
) -> None:
    """Stop a project (or one unit): queued tasks are revoked, running sessions stop before
    their next turn with their checkpoints kept; `devloop resume` (or `devloop unblock` for
    a unit) carries on."""
    from devloop.fleet.human import cancel_project, cancel_unit

    queue = queue_of(ctx)
    pid, folder = store_for(project)
    with redis_endpoint(folder or Path("."), load_settings()) as endpoint:
        queue.connect(endpoint.celery_url)
        store = RedisStore(connect(endpoint.url))
        try:
            ids = cancel_unit(store, pid, unit, "devloop cancel") if unit else cancel_project(
                store, pid, "devloop cancel")
        except ValueError as exc:
            fail([Problem(str(project), unit or "project", str(exc), "check `devloop status`")])
        queue.revoke(ids)
    what = f"unit {unit}" if unit else pid
    out.print(f"{what}: cancelled ({len(ids)} queued task(s) revoked); running sessions stop "
              "before their next turn, checkpoints kept")


@commands.command()
def resume(
    ctx: typer.Context,
    project: Annotated[Path, typer.Argument(help="The project folder (or its id).")],
    max_usd: Annotated[
        float | None, typer.Option(min=0.000001, help="A new spend cap in dollars.")
    ] = None,
    workers: WorkersOpt = None,
    llm: LlmOpt = None,
    script: ScriptOpt = None,
    console: ConsoleOpt = None,
    console_port: ConsolePortOpt = None,
) -> None:
    """Carry a paused or cancelled project on from its checkpoints: a folder runs again as
    `devloop run` does (same exit codes); an id re-sends its units to your workers."""
    settings = load_settings()
    pid, folder = store_for(project)
    if folder is not None:
        from devloop.cli.run.project_run import options_for, run_project
        from devloop.project.lastrun import Given

        given = Given(llm=llm, script=script, workers=workers, console=console,
                      console_port=console_port)
        options = options_for(folder, given, max_usd=max_usd, resume=True)
        raise typer.Exit(run_project(options, settings, queue_of(ctx)))
    from devloop.fleet.human import resume_project

    queue = queue_of(ctx)
    with redis_endpoint(Path("."), settings) as endpoint:
        queue.connect(endpoint.celery_url)
        store = RedisStore(connect(endpoint.url))
        dispatches = resume_project(store, pid, max_usd)
        queue.send(dispatches)
    out.print(f"{pid}: resumed; re-sent {len(dispatches)} unit(s)")
