"""The `devloop` command line, assembled: every group added here, in the order `--help`
lists them; run_cli starts it with the task queue the entry point made."""

from __future__ import annotations

from typing import Annotated

import typer

from devloop.cli import (
    fleet_commands,
    library_commands,
    people_commands,
    relay_commands,
    reset_command,
)
from devloop.cli.terminal import err, out
from devloop.fleet.queue import QueueUnreachable, TaskQueue
from devloop.safe.private import NotPrivate
from devloop.server.redis_server import RedisServerError
from devloop.store.base import StoreUnavailable


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import PackageNotFoundError, version

        from devloop.server.redis_server import embedded_server

        try:
            ours = version("devloop")
        except PackageNotFoundError:  # run from a checkout that was never installed
            ours = "(not installed)"
        out.print(f"devloop {ours} (embedded server: {embedded_server()})", highlight=False)
        raise typer.Exit()


def main_options(
    show_version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
) -> None:
    """DevLoop: a fleet of coding agents."""


def build() -> typer.Typer:
    """The whole CLI: the library's commands, then the people's and the fleet's, then
    the groups."""
    app = typer.Typer(
        no_args_is_help=True, add_completion=False, help="DevLoop: a fleet of coding agents."
    )
    app.callback()(main_options)
    app.add_typer(library_commands.commands)
    app.add_typer(reset_command.commands)
    app.add_typer(people_commands.commands)
    app.add_typer(fleet_commands.commands)
    app.add_typer(library_commands.contract_app, name="contract")
    app.add_typer(library_commands.session_app, name="session")
    app.add_typer(library_commands.sandbox_app, name="sandbox")
    app.add_typer(library_commands.toolchain_app, name="toolchain")
    app.add_typer(relay_commands.relay_app, name="relay")
    return app


app = build()


def run_cli(queue: TaskQueue) -> None:
    """Run the command line, its fleet commands sending through queue."""
    try:
        app(prog_name="devloop", obj=queue)
    except NotPrivate as exc:  # a .devloop/ that is not this user's alone: the user's to fix
        err.print(str(exc), markup=False)
        raise SystemExit(2) from None
    except (StoreUnavailable, QueueUnreachable) as lost:
        # Redis unreachable, or gone mid-command (a run's own stops as its run ends): the
        # environment, not the input, so said in one line with exit 3, as `devloop run` does.
        from devloop.fleet.failures import one_line  # (it loads the fleet's dispatch)

        err.print(f"Redis: unreachable ({one_line(lost)}); fix: start it (or point "
                  "DEVLOOP_REDIS_URL at a live one), then run the command again",
                  markup=False, highlight=False)
        raise SystemExit(3) from None
    except RedisServerError as exc:  # the embedded server: not startable, or another's
        err.print(f"Redis: {exc}", markup=False, highlight=False)
        raise SystemExit(3) from None
