"""`devloop relay show|answer`: play the model for `devloop stub-llm --relay DIR`
(devloop/cli/commands.py adds `relay_app` as the `relay` group)."""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from devloop.cli.terminal import fail, out
from devloop.core.errors import Problem
from devloop.llm.stub.relay import RelayAnswerInvalid, RelayDir, render, view, write_answer
from devloop.llm.stub.relay.answer import GUIDE, read_turn
from devloop.llm.stub.turn import Block, Turn
from devloop.safe.private import dir_problem

relay_app = typer.Typer(
    no_args_is_help=True,
    help="Play the model: read and answer the requests `devloop stub-llm --relay DIR` files.",
)

RelayDirArg = Annotated[Path, typer.Argument(help="The relay directory (`stub-llm --relay`).")]
SeqArg = Annotated[
    int | None, typer.Argument(help="The request's number (default: the one waiting).")
]


def _relay(relay_dir: Path) -> RelayDir:
    if not relay_dir.is_dir():
        fail([Problem(str(relay_dir), "folder", "is not a relay directory",
                      "pass the DIR of a running `devloop stub-llm --relay DIR`")])
    if (problem := dir_problem(relay_dir)) is not None:
        # Requests read from, or answers written into, a directory someone else controls
        # would be theirs: the relay makes its directory this user's alone.
        fail([Problem(str(relay_dir), "folder", problem,
                      "use the DIR your own `devloop stub-llm --relay DIR` made")])
    return RelayDir(relay_dir)


def _next_command(relay: RelayDir) -> str:
    return f"`devloop relay show {shlex.quote(str(relay.root))} --wait 600`"


@relay_app.command("show")
def show(
    relay_dir: RelayDirArg,
    seq: SeqArg = None,
    wait: Annotated[
        float, typer.Option(min=0, help="Seconds to wait for a request when none is waiting.")
    ] = 0.0,
    as_json: Annotated[bool, typer.Option("--json", help="The view as JSON.")] = False,
) -> None:
    """Show a request as the model sees it: system prompt and tools once per session, then
    what is new (exit 1 when no request is waiting)."""
    relay = _relay(relay_dir)
    if seq is None:
        deadline = time.monotonic() + wait
        while not relay.waiting() and time.monotonic() < deadline:
            time.sleep(0.2)
        waiting = relay.waiting()
        if not waiting:
            out.print(f"no request waiting in {relay.root} ({len(relay.entries())} so far); "
                      f"wait for the next: {_next_command(relay)}", markup=False)
            raise typer.Exit(1)
        seq = waiting[0].seq
        if len(waiting) > 1:
            others = ", ".join(str(e.seq) for e in waiting[1:])
            out.print(f"(also waiting: {others})", markup=False, highlight=False)
    try:
        shown = view(relay, seq)
    except KeyError:
        fail([Problem(str(relay.root), "seq", f"no request {seq}",
                      f"list them with {_next_command(relay)}")])
    out.print(shown.as_json() if as_json else render(shown, relay), markup=False,
              highlight=False)


@relay_app.command("answer")
def answer(
    relay_dir: RelayDirArg,
    seq: SeqArg = None,
    file: Annotated[
        Path | None, typer.Option(help=f"The turn's blocks in YAML, as a stub script's turn "
                                       f"(`-`: standard input); {GUIDE}.")
    ] = None,
    text: Annotated[
        str | None, typer.Option(help="Answer with this text alone (ends the session's turn).")
    ] = None,
) -> None:
    """Wrap a turn's blocks into a Messages-API response and hand it to the waiting request."""
    relay = _relay(relay_dir)
    if (file is None) == (text is None):
        fail([Problem("answer", "--file/--text", "give exactly one",
                      "write the blocks to a file and pass --file FILE, or pass --text TEXT")])
    if seq is None:
        waiting = relay.waiting()
        if len(waiting) != 1:
            which = ", ".join(str(e.seq) for e in waiting) or "none"
            fail([Problem(str(relay.root), "seq", f"{len(waiting)} requests waiting ({which})",
                          "name the request to answer: `devloop relay answer DIR SEQ ...`")])
        seq = waiting[0].seq
    try:
        if text is not None:
            turn = Turn(content=[Block(text=text)])
        elif str(file) == "-":
            turn = read_turn(sys.stdin.read(), "<stdin>")
        else:
            assert file is not None
            turn = read_turn(file.read_text(encoding="utf-8"), str(file))
        message = write_answer(relay, seq, turn)
    except RelayAnswerInvalid as exc:
        fail(exc.problems)
    except OSError as exc:
        fail([Problem(str(file), "--file", str(exc), "pass a readable file")])
    names = [b["name"] if b["type"] == "tool_use" else "text" for b in message["content"]]
    out.print(f"answered request {seq}: {', '.join(names) or 'no blocks'}; stop_reason "
              f"{message['stop_reason']}", markup=False, highlight=False)
    out.print(f"next: {_next_command(relay)}", markup=False, highlight=False)
