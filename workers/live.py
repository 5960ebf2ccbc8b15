"""The live view of a run: a rich table of units and a progress bar."""

from __future__ import annotations

from rich.console import Console, Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from devloop.fleet.status import ProjectStatus, UnitRow

COLORS = {
    "passed": "green",
    "blocked": "red",
    "blocked_upstream": "red",
    "coding": "yellow",
    "testing": "cyan",
    "waiting_model": "magenta",
    "pending": "dim",
    "ready": "dim",
}


def status_table(state: ProjectStatus) -> Table:
    """One row per unit: status, attempt, tokens, cost, elapsed, and why it waits or stopped."""
    table = Table(title=f"{state.pid}", title_justify="left")
    for name, justify in [
        ("unit", "left"),
        ("status", "left"),
        ("attempt", "right"),
        ("tokens", "right"),
        ("cost $", "right"),
        ("elapsed", "right"),
        ("why", "left"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in state.units:
        table.add_row(
            row.unit_id,
            Text(row.status, style=COLORS.get(row.status, "")),
            str(row.attempt),
            f"{row.tokens:,}",
            f"{row.cost_usd:.4f}",
            f"{row.elapsed_s:.1f}s",
            Text(_why(row), overflow="fold"),
        )
    return table


def _why(row: UnitRow) -> str:
    """The blocked reason, else the last error (a waiting model's, a failed step's), else
    a note (test runs starved by a busy machine)."""
    return (row.blocked_reason or row.last_error or row.note or "")[:160]


def live_view(state: ProjectStatus, footer: str | None = None) -> Group:
    """The table with a progress bar of finished units under it (and `footer`: the run's
    workers and Redis, when a run shows it)."""
    done = sum(u.status in ("passed", "blocked", "blocked_upstream") for u in state.units)
    total, waiting = len(state.units), state.count("waiting_model")
    caption = Text(
        f"{done}/{total} units finished, {state.count('passed')} passed, "
        f"{state.count('blocked') + state.count('blocked_upstream')} blocked"
        + (f", {waiting} waiting for the model" if waiting else "")
    )
    # A grid row keeps the bar and its caption on one line (a bare bar ends no line).
    progress = Table.grid(padding=(0, 1))
    progress.add_row(ProgressBar(total=total, completed=done, width=30), caption)
    parts: list[Table | Text] = [status_table(state), progress]
    if footer:
        parts.append(Text(footer, style="dim"))
    if state.environment_error:
        parts.append(Text(f"environment: {state.environment_error}", style="red"))
    return Group(*parts)


def print_status(console: Console, state: ProjectStatus) -> None:
    """Print the table once (devloop status)."""
    console.print(live_view(state))
