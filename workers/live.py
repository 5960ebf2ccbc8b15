"""The live view of a run: a rich table of units and a progress bar.

The table fits the terminal: at STEP_COLUMNS columns or more it shows what each running
session is doing; at NARROW_COLUMNS or fewer it drops tokens and cost before it would
cut a unit's name or status.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from devloop.fleet.status import ProjectStatus, UnitRow

COLORS = {
    "passed": "green",
    "blocked": "red",
    "blocked_upstream": "red",
    "interrupted": "red",
    "paused": "magenta",
    "coding": "yellow",
    "testing": "cyan",
    "waiting_model": "magenta",
    "pending": "dim",
    "ready": "dim",
    "review": "blue",
}
STEP_COLUMNS = 120  # from this width on, the running session's step has a column
NARROW_COLUMNS = 60  # at this width or less, tokens and cost make room for unit and status
SCRIPTED = "scripted"  # the label of a stub run's costs: priced turns, nothing spent
STEP_WIDTH = 36  # the step column's widest
WHY_MIN = 10  # the why column's narrowest
HUMAN = ("blocked", "review")  # the statuses that wait for a person


class StatusTable:
    """The units table, laid out for the width it is rendered at."""

    def __init__(self, state: ProjectStatus) -> None:
        self.state = state

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield status_table(self.state, options.max_width)


def status_table(state: ProjectStatus, width: int = 100) -> Table:
    """One row per unit: status, attempt, tokens, cost, elapsed, (step,) and why it waits
    or stopped; the columns that fit `width` (unit, status and why always do)."""
    cost = f"{SCRIPTED} $" if state.scripted else "cost $"
    cells = {
        "unit": [u.unit_id for u in state.units],
        "status": [u.label for u in state.units],
        "attempt": [str(u.attempt) for u in state.units],
        "tokens": [f"{u.tokens:,}" for u in state.units],
        cost: [f"{u.cost_usd:.4f}" for u in state.units],
        "elapsed": [f"{u.elapsed_s:.1f}s" for u in state.units],
        "step": [u.step or "" for u in state.units],
    }
    shown = _fitting(cells, cost, width)
    table = Table(title=f"{state.pid}", title_justify="left")
    for name in shown:
        right = name in ("attempt", "tokens", cost, "elapsed")
        if name == "step":
            table.add_column(name, no_wrap=True, overflow="ellipsis", max_width=STEP_WIDTH)
        else:
            table.add_column(name, justify="right" if right else "left", no_wrap=True)
    table.add_column("why", overflow="fold", ratio=1, min_width=WHY_MIN)
    for i, row in enumerate(state.units):
        line: list[RenderableType] = []
        for name in shown:
            text = cells[name][i]
            style = (COLORS.get(row.status, "") if name == "status"
                     else "dim" if name == "step" else "")
            line.append(Text(text, style=style))
        line.append(Text(_why(row), overflow="fold"))
        table.add_row(*line)
    return table


def _fitting(cells: dict[str, list[str]], cost: str, width: int) -> list[str]:
    """The columns to show at `width`: step only from STEP_COLUMNS on, tokens and cost not
    at NARROW_COLUMNS or less; then, while the table would not fit, drop step, cost, tokens,
    elapsed and attempt, in that order, so unit and status are never cut first."""
    shown = list(cells)
    if width < STEP_COLUMNS:
        shown.remove("step")
    if width <= NARROW_COLUMNS:
        shown = [c for c in shown if c not in ("tokens", cost)]

    def needed(columns: list[str]) -> int:
        widths = [min(max([len(c), *map(len, cells[c])]),
                      STEP_WIDTH if c == "step" else 10**6) for c in columns]
        return sum(widths) + WHY_MIN + 3 * (len(columns) + 1) + 1  # borders and padding

    for name in ("step", cost, "tokens", "elapsed", "attempt"):
        if needed(shown) <= width:
            break
        if name in shown:
            shown.remove(name)
    return shown


def _why(row: UnitRow) -> str:
    """The reason it is blocked, waits or stopped, else the last error, else a note
    (test runs starved by a busy machine)."""
    return (row.reason or row.blocked_reason or row.last_error or row.note or "")[:160]


def live_view(state: ProjectStatus, footer: str | None = None) -> Group:
    """The table with a progress bar of finished units under it (and `footer`: the run's
    workers and Redis, when a run shows it)."""
    done = sum(u.status in ("passed", "blocked", "blocked_upstream") for u in state.units)
    total, waiting = len(state.units), state.count("waiting_model")
    caption = Text(
        f"{done}/{total} units finished, {state.count('passed')} passed, "
        f"{state.count('blocked') + state.count('blocked_upstream')} blocked"
        + (f", {waiting} waiting for the model" if waiting else "")
        + (f", {state.count('interrupted')} interrupted" if state.count("interrupted") else "")
        + ("; costs scripted (stub)" if state.scripted else "")
    )
    marked = sum(u.scripted for u in state.units)
    # A grid row keeps the bar and its caption on one line (a bare bar ends no line).
    progress = Table.grid(padding=(0, 1))
    progress.add_row(ProgressBar(total=total, completed=done, width=30), caption)
    parts: list[RenderableType] = [StatusTable(state), progress]
    if marked:
        parts.append(Text(scripted_legend(marked), style="dim"))
    parts += people_lines(state)
    if footer:
        parts.append(Text(footer, style="dim"))
    if state.environment_error:
        parts.append(Text(f"environment: {state.environment_error}", style="red"))
    return Group(*parts)


def scripted_legend(marked: int) -> str:
    """What `passed (scripted)` means, under the table."""
    units, them = ("1 unit", "it") if marked == 1 else (f"{marked} units", "them")
    return (f"passed (scripted): {units} passed under the stub's scripted turns, which prove "
            f"the script, not the code; a run with a real model builds {them} again from "
            "implement")


def print_status(console: Console, state: ProjectStatus) -> None:
    """Print the table once (devloop status)."""
    console.print(live_view(state))


def epilogue(state: ProjectStatus, folder: str, files: bool = True) -> list[str]:
    """What the end of a run says: where the files are, the report command, and each
    blocked unit with its reason and the commands that move it on."""
    quoted = shlex.quote(folder)
    lines = []
    if files:
        lines += [f"files:  {folder} (units/*/code, units/*/tests, units/*/runs, "
                  "timeline.ndjson, bugs.ndjson)",
                  f"report: devloop report {quoted} -o {shlex.quote(folder + '/report.html')}"]
        if state.scripted:
            lines.append(f"cost:   ${sum(u.cost_usd for u in state.units):.4f} {SCRIPTED} "
                         "(the stub's turns priced as Claude; nothing was spent)")
    blocked = [u for u in state.units if u.status == "blocked"]
    for row in blocked:
        lines.append(f"blocked: {row.unit_id}: {row.reason or row.blocked_reason or '?'}")
        lines += [f"  {command}" for command in row.next_steps]
    waiting = [u for u in state.units if u.status == "blocked_upstream"]
    if waiting:
        lines.append("waiting on a blocked unit: "
                     + ", ".join(f"{u.unit_id} ({u.reason})" for u in waiting))
    return lines


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
        why = (row.reason or row.blocked_reason or "blocked")[:160]
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
