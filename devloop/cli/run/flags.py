"""The options `devloop run`, `resume` and `unblock --run` share, declared once; each one
not given is None, so the folder's last run's value holds (devloop/project/lastrun.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

Llm = Literal["anthropic", "stub"]
LAST = "default: the last run's"  # in (parentheses): rich would take [brackets] for markup

WorkersOpt = Annotated[
    int | None, typer.Option(min=1, max=64, help=f"Worker processes ({LAST}, else 2).")
]
LlmOpt = Annotated[
    Llm | None,
    typer.Option(help=f"Claude (ANTHROPIC_API_KEY) or the stub ({LAST}, else anthropic)."),
]
ScriptOpt = Annotated[
    Path | None, typer.Option(help=f"Stub script ({LAST}, else DIR/stub.yaml).")
]
ConsoleOpt = Annotated[
    bool | None,
    typer.Option("--console/--no-console", help=f"Serve the live console beside the run "
                 f"({LAST})."),
]
ConsoleHostOpt = Annotated[
    str | None, typer.Option(help=f"The console's address ({LAST}, else 127.0.0.1).")
]
ConsolePortOpt = Annotated[
    int | None,
    typer.Option(help=f"The console's port ({LAST}, else DEVLOOP_CONSOLE_PORT, 8765; a free "
                 "one when that is taken).", min=1, max=65535),
]
FlowerPortOpt = Annotated[int | None, typer.Option(help=f"Flower's port ({LAST}, else 5555).")]
