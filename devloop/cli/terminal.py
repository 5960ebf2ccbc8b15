"""What every command prints through: stdout, stderr, and one line per problem with exit 2."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console

from devloop.core.errors import Problem

out = Console(soft_wrap=True)  # a printed command must never be broken over two lines
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_INVALID = 2


def fail(problems: list[Problem] | list[str]) -> NoReturn:
    """Print one line per problem on stderr and exit 2."""
    for problem in problems:
        err.print(str(problem), markup=False)
    raise typer.Exit(EXIT_INVALID)
