"""The task queue a command sends through: the one the entry point handed the CLI."""

from __future__ import annotations

import typer

from devloop.fleet.queue import TaskQueue


def queue_of(ctx: typer.Context) -> TaskQueue:
    """The TaskQueue run_cli put on the root context (every command's context inherits it)."""
    queue: TaskQueue | None = ctx.obj
    if queue is None:  # the CLI called without run_cli (a test's CliRunner): a bug of the caller
        raise RuntimeError("no task queue: start the CLI with devloop.cli.commands.run_cli(queue)")
    return queue
