"""`devloop reset DIR [UNIT...]`: start units over, keeping the spec."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from devloop.cli.project_arg import missing_folder
from devloop.cli.terminal import fail, out
from devloop.core.config import load_settings
from devloop.core.errors import Problem, ProjectInvalid
from devloop.core.suggest import unknown
from devloop.project.load import Project, load_project
from devloop.project.runlock import FolderBusy, folder_lock
from devloop.server.embedded import NotPrivate, redis_endpoint
from devloop.server.redis_server import connect
from devloop.store import RedisStore

EXIT_DECLINED = 1  # the person said no: nothing was reset


commands = typer.Typer()  # devloop/cli/commands.py adds it to the CLI


@commands.command()
def reset(
    project_dir: Annotated[Path, typer.Argument(help="The project folder.")],
    units: Annotated[
        list[str] | None,
        typer.Argument(help="The units to start over (every unit when none is named); the "
                       "units that ran on top of them start over too."),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Reset without asking.")] = False,
) -> None:
    """Start units over as if they had never run (their code, tests, runs, contract.json,
    coder.log, sessions and attempts go; the spec stays), after asking; exit 0 reset,
    1 declined, 2 bad input or a run live on the folder."""
    if (missing := missing_folder(project_dir)) is not None:
        fail([missing])
    try:
        project = load_project(project_dir)
    except ProjectInvalid as exc:
        fail(exc.problems)
    graph = project.graph()
    wanted = list(dict.fromkeys(units or []))
    strangers = [unknown(str(project_dir), "UNIT", "unit", u, graph) for u in wanted
                 if u not in graph]
    if strangers:
        fail(strangers)
    folder = shlex.quote(str(project_dir))
    try:
        with folder_lock(project_dir):  # no run may start (or be live) while it resets
            _reset_held(project, project_dir, wanted, yes)
    except FolderBusy as busy:
        fail([Problem(str(project_dir), "devloop run",
                      f"a run (pid {busy.pid or '?'}) is live on this folder",
                      f"stop it first (Ctrl-C in its terminal, or `devloop cancel {folder}`), "
                      "then reset")])
    except NotPrivate as refused:
        fail([str(refused)])


def _reset_held(project: Project, project_dir: Path, wanted: list[str], yes: bool) -> None:
    """reset, once the folder's run lock is held."""
    # Here, not at the top: every command would load the wipe's runners and roles.
    from devloop.fleet.marks import scripted_now
    from devloop.fleet.reset import agreed, plan_reset, question, told
    from devloop.fleet.wipe import live_steps, reset_in_folder, reset_in_store

    pid, graph = project.pid, project.graph()
    folder = shlex.quote(str(project_dir))
    with redis_endpoint(project_dir, load_settings()) as endpoint:
        store = RedisStore(connect(endpoint.url))
        try:
            if endpoint.server is not None:
                # This command started the Redis: no worker of it lives, and every lease
                # there is a dead one's (as `devloop run` finds at its start).
                store.drop_leases(pid)
            states = store.get_states(pid, list(graph))
            plan = plan_reset(graph, states, wanted)
            busy = live_steps(store, pid, plan.units)
            if busy:
                fail([Problem(str(project_dir), unit, why,
                              f"stop it first (`devloop cancel {folder} {unit}`), then reset")
                      for unit, why in busy.items()])
            for line in told(plan, states):
                out.print(line, markup=False, highlight=False, soft_wrap=True)
            if not yes:
                out.print(question(plan, pid), end="", markup=False, highlight=False)
                answer = sys.stdin.readline()
                if not (answer.endswith("\n") and sys.stdin.isatty()):
                    out.print()  # what was typed did not end the prompt's line
                if not agreed(answer):
                    out.print("nothing was reset", markup=False)
                    raise typer.Exit(EXIT_DECLINED)
            store.import_project(project)  # the folder's spec and edits, as a run takes them
            reset_in_store(store, pid, graph, plan.units, by="devloop reset")
            reset_in_folder(store, pid, project_dir, plan.units)
            stub = scripted_now(store, pid)
        finally:
            store.close()
    n = len(plan.units)
    out.print(f"reset: {', '.join(plan.units)}: pending again, as if never run; "
              f"the spec is kept", markup=False, highlight=False, soft_wrap=True)
    run = f"devloop run {folder}" + (" --llm stub" if stub else "")
    out.print(f"next: {run} (builds the {'unit' if n == 1 else f'{n} units'} again)",
              markup=False, highlight=False, soft_wrap=True)
