"""The live view of a run: a rich table of units and a progress bar."""

from __future__ import annotations

from collections.abc import Callable

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
    "review": "blue",
}
HUMAN = ("blocked", "review")


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
    parts += people_lines(state)
    if footer:
        parts.append(Text(footer, style="dim"))
    if state.environment_error:
        parts.append(Text(f"environment: {state.environment_error}", style="red"))
    return Group(*parts)


def print_status(console: Console, state: ProjectStatus) -> None:
    """Print the table once (devloop status)."""
    console.print(live_view(state))


def people_lines(state: ProjectStatus) -> list[Text]:
    """Lines for people under the table: who waits for a person, the spend, a pause."""
    lines = []
    waiting = [f"{u.unit_id} ({u.status})" for u in state.units if u.status in HUMAN]
    if waiting:
        lines.append(Text(f"needs a human: {', '.join(waiting)}", style="bold red"))
    if state.max_usd is not None:
        lines.append(Text(f"spent ${state.spent_usd:.4f} of ${state.max_usd:.4f}"))
    if state.paused:
        lines.append(Text(f"paused: {state.paused}: no new session starts; running ones stop "
                          "after their turn", style="bold red"))
    return lines


def human_line(pid: str, row: UnitRow, link: str | None) -> str:
    """One line a person can act on (or a desktop notifier can show) for a unit that waits."""
    if row.status == "review":
        what = (f"{row.unit_id} waits for review: `devloop review {pid} {row.unit_id} "
                "--approve` or `--changes TEXT`")
    else:
        why = (row.blocked_reason or "blocked")[:160]
        what = (f"{row.unit_id} is blocked ({why}): `devloop unblock {pid} {row.unit_id} "
                '--hint "..."`')
    return f"needs a human: {what}" + (f" or {link}" if link else "")


class HumanNotices:
    """Says once, above the live table, each time a unit starts waiting for a person."""

    def __init__(self, link: Callable[[str], str | None] = lambda unit: None) -> None:
        self.link = link
        self.seen: set[tuple[str, str, int]] = set()

    def new(self, state: ProjectStatus) -> list[str]:
        """The lines for units that started waiting since the last look."""
        lines = []
        for row in state.units:
            key = (row.unit_id, row.status, row.attempt)
            if row.status in HUMAN and key not in self.seen:
                self.seen.add(key)
                lines.append(human_line(state.pid, row, self.link(row.unit_id)))
        return lines
