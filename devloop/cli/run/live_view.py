"""The live view of a run: a rich table of units and a progress bar.

The table fits the terminal: at STEP_COLUMNS columns or more it shows what each running
session is doing; at NARROW_COLUMNS or fewer it drops tokens and cost before it would
cut a unit's name or status. A reason gets room to be read (WHY_READABLE columns, before
step, cost, tokens, elapsed and attempt) and at most WHY_LINES lines: a longer one ends
at a word with "…", and a line under the table says where every reason is in full.

On a terminal the live view is never taller than it: when every unit's row does not fit,
the table shows the rows that matter (units running, waiting for a person, the ones that
changed last), in units.json order, and one line counts the rest by status. A frame then
costs the same at 10,000 units as at 100 (`devloop status` still prints every row).
"""

from __future__ import annotations

import shlex
import time
from collections import Counter
from collections.abc import Callable

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from devloop.core.money import spent_words, usd
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
WHY_READABLE = 32  # the why column's width, when a reason needs it, before optional columns
WHY_LINES = 4  # a reason's most lines in the table; the rest is cut at a word, with "…"
MORE = "…"
HUMAN = ("blocked", "review")  # the statuses that wait for a person
NAMED = 10  # units the "needs a human" line names; it counts the others
RECENT_ROWS = 10  # of the units that changed last, the most a bounded table lists
FRAME_EVERY_S = 1.0  # a run's view is drawn again at most this often (notices aside)
TABLE_LINES = 5  # a table's lines besides its rows: title, borders and header


class StatusTable:
    """The units table, laid out for the width it is rendered at; with `lines`, at most
    that many lines tall (the rows that matter and a line counting the rest)."""

    def __init__(self, state: ProjectStatus, lines: int | None = None) -> None:
        self.state, self.lines = state, lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        state, lines = self.state, self.lines
        if lines is not None and len(state.units) + TABLE_LINES > lines:
            yield from self._bounded(console, options, lines)
            return
        table, cut = fitted_table(state, options.max_width, console)
        yield table
        if cut:
            yield Text(cut_note(state), style="dim")

    def _bounded(self, console: Console, options: ConsoleOptions, lines: int) -> RenderResult:
        """The rows that matter, as many as fit in `lines` with the line counting the rest
        (a reason over several lines takes room from the rows)."""
        order = rows_that_matter(self.state)
        keep = max(1, lines - TABLE_LINES - 1)
        while True:
            kept = set(order[:keep])
            shown = self.state.model_copy(
                update={"units": [u for u in self.state.units if u.unit_id in kept]})
            table, cut = fitted_table(shown, options.max_width, console)
            parts: list[RenderableType] = [table]
            if cut:
                parts.append(Text(cut_note(self.state), style="dim"))
            parts.append(Text(rest_line(self.state, kept), style="dim"))
            rendered = console.render_lines(Group(*parts), options, pad=False)
            if len(rendered) <= lines or keep == 1:
                break
            keep = max(1, keep - (len(rendered) - lines))
        for line in rendered:
            yield from line
            yield Segment.line()


def rows_that_matter(state: ProjectStatus) -> list[str]:
    """Unit ids worth a row, most first: running a step, waiting for a person, changed
    last (newest first: a unit just passed, blocked or started). Units queued for a
    worker, pending or long finished are counted under the table, not listed."""
    stepping = [u.unit_id for u in state.units if u.step is not None]
    human = [u.unit_id for u in state.units if u.status in HUMAN]
    return list(dict.fromkeys([*stepping, *human, *state.recent[:RECENT_ROWS]]))


def rest_line(state: ProjectStatus, shown: set[str]) -> str:
    """The line under a bounded table: how many units it leaves out, by status."""
    hidden = Counter(u.label for u in state.units if u.unit_id not in shown)
    total = sum(hidden.values())
    counts = ", ".join(f"{n:,} {status}" for status, n in hidden.most_common())
    return f"{MORE} {total:,} more unit{'' if total == 1 else 's'} not shown: {counts}"


def fitted_table(state: ProjectStatus, width: int, console: Console) -> tuple[Table, bool]:
    """One row per unit: status, attempt, tokens, cost, elapsed, (step,) and why it waits
    or stopped; the columns that fit `width` (unit, status and why always do), and whether
    a reason was cut to fit."""
    cost = f"{SCRIPTED} $" if state.scripted else "cost $"
    cells = {
        "unit": [u.unit_id for u in state.units],
        "status": [u.label for u in state.units],
        "attempt": [str(u.attempt) for u in state.units],
        "tokens": [f"{u.tokens:,}" for u in state.units],
        cost: [usd(u.cost_usd, sign=False) for u in state.units],
        "elapsed": [f"{u.elapsed_s:.1f}s" for u in state.units],
        "step": [u.step or "" for u in state.units],
    }
    whys = [_why(u) for u in state.units]
    shown = _fitting(cells, cost, width, _why_wanted(whys, console))
    room = max(WHY_MIN, width - _widths(cells, shown) - 3 * (len(shown) + 1) - 1)
    told = [fit_lines(why, room, WHY_LINES, console) for why in whys]
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
        line.append(Text(told[i], overflow="fold"))
        table.add_row(*line)
    return table, told != whys


def _widths(cells: dict[str, list[str]], columns: list[str]) -> int:
    """What the columns' text takes (the step column at most STEP_WIDTH)."""
    return sum(min(max([len(c), *map(len, cells[c])]), STEP_WIDTH if c == "step" else 10**6)
               for c in columns)


def _fitting(cells: dict[str, list[str]], cost: str, width: int, why: int = WHY_MIN) -> list[str]:
    """The columns to show at `width`: step only from STEP_COLUMNS on, tokens and cost not
    at NARROW_COLUMNS or less; then, while the table and `why` columns of reason would not
    fit, drop step, cost, tokens, elapsed and attempt, in that order, so unit and status
    are never cut first."""
    shown = list(cells)
    if width < STEP_COLUMNS:
        shown.remove("step")
    if width <= NARROW_COLUMNS:
        shown = [c for c in shown if c not in ("tokens", cost)]

    def needed(columns: list[str]) -> int:
        return _widths(cells, columns) + why + 3 * (len(columns) + 1) + 1  # borders, padding

    for name in ("step", cost, "tokens", "elapsed", "attempt"):
        if needed(shown) <= width:
            break
        if name in shown:
            shown.remove(name)
    return shown


def _why_wanted(whys: list[str], console: Console) -> int:
    """The narrowest why column, WHY_MIN to WHY_READABLE, that holds every reason in
    WHY_LINES lines (WHY_READABLE when none does)."""
    low, high = WHY_MIN, WHY_READABLE  # high always wanted; is low enough?
    if all(_fits(why, low, WHY_LINES, console) for why in whys):
        return low
    while high - low > 1:
        middle = (low + high) // 2
        fine = all(_fits(why, middle, WHY_LINES, console) for why in whys)
        low, high = (low, middle) if fine else (middle, high)
    return high


def _fits(text: str, width: int, lines: int, console: Console) -> bool:
    return len(text) <= width or len(Text(text).wrap(console, width, overflow="fold")) <= lines


def fit_lines(text: str, width: int, lines: int, console: Console) -> str:
    """`text` when it wraps to at most `lines` lines of `width`, else its longest run of
    whole words that does, ended with "…" (a word longer than that is cut)."""
    def fits(candidate: str) -> bool:
        return _fits(candidate, width, lines, console)

    if fits(text):
        return text
    words = text.split(" ")
    low, high = 0, len(words)  # fits(words[:low] + MORE); not words[:high]
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(_cut(words[:middle])) else (low, middle)
    if low == 0:  # not even one word: its characters, as many as fit
        return text[: max(1, width * lines - 1)] + MORE
    return _cut(words[:low])


def _cut(words: list[str]) -> str:
    """Words ended with "…" (a clause's own punctuation dropped before it)."""
    return " ".join(words).rstrip(" ;:,.") + MORE


def cut_note(state: ProjectStatus) -> str:
    """The lines under a table whose reasons were cut: where each is in full (the command
    on a line of its own, as the end of a run prints commands)."""
    target = shlex.quote(state.folder) if state.folder else state.pid
    return f"{MORE} cut to fit; every reason in full:\n  devloop status {target} --json"


def _why(row: UnitRow) -> str:
    """The reason it is blocked, waits or stopped, else the last error, else a note
    (test runs starved by a busy machine)."""
    return row.reason or row.blocked_reason or row.last_error or row.note or ""


def live_view(state: ProjectStatus, footer: str | None = None) -> Group:
    """The table with a progress bar of finished units under it (and `footer`: the run's
    workers and Redis, when a run shows it)."""
    return Group(StatusTable(state), *view_parts(state, footer))


class LiveView:
    """`live_view` for `devloop run`: on a terminal, no taller than it (the table gives up
    rows to fit); elsewhere (a log, a pipe) every row, as `live_view`."""

    def __init__(self, state: ProjectStatus, footer: str | None = None) -> None:
        self.state, self.footer = state, footer

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        parts = view_parts(self.state, self.footer)
        if not console.is_terminal:
            yield StatusTable(self.state)
            yield from parts
            return
        below = console.render_lines(Group(*parts), options, pad=False)
        # One line stays free: the cursor's, under the frame.
        lines = max(TABLE_LINES + 2, options.size.height - len(below) - 1)
        yield StatusTable(self.state, lines=lines)
        for line in below:  # drawn once: measured and shown
            yield from line
            yield Segment.line()


def view_parts(state: ProjectStatus, footer: str | None = None) -> list[RenderableType]:
    """What the live view shows under the table: the progress bar and its counts, the
    scripted legend, the lines for people, the footer and an environment problem."""
    counts = Counter(u.status for u in state.units)
    done = counts["passed"] + counts["blocked"] + counts["blocked_upstream"]
    total, waiting = len(state.units), counts["waiting_model"]
    caption = Text(
        f"{done}/{total} units finished, {counts['passed']} passed, "
        f"{counts['blocked'] + counts['blocked_upstream']} blocked"
        + (f", {waiting} waiting for the model" if waiting else "")
        + (f", {counts['interrupted']} interrupted" if counts["interrupted"] else "")
        + ("; costs scripted (stub)" if state.scripted else "")
    )
    marked = sum(u.scripted for u in state.units)
    # A grid row keeps the bar and its caption on one line (a bare bar ends no line).
    progress = Table.grid(padding=(0, 1))
    progress.add_row(ProgressBar(total=total, completed=done, width=30), caption)
    parts: list[RenderableType] = [progress]
    if marked:
        parts.append(Text(scripted_legend(marked, state.folder), style="dim"))
    parts += people_lines(state)
    if footer:
        parts.append(Text(footer, style="dim"))
    if state.environment_error:
        parts.append(Text(f"environment: {state.environment_error}", style="red"))
    return parts


def scripted_legend(marked: int, folder: str | None = None) -> str:
    """What `passed (scripted)` means, under the table (with the command for Claude)."""
    units, them = ("1 unit", "it") if marked == 1 else (f"{marked} units", "them")
    run = f" (`devloop run {shlex.quote(folder)} --llm anthropic`)" if folder else ""
    return (f"passed (scripted): {units} passed under the stub's scripted turns, which prove "
            f"the script, not the code; a run with a real model{run} builds {them} again "
            "from implement")


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
            lines.append(f"cost:   {usd(state.spent_usd)} {SCRIPTED} "
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
        more = len(waiting) - NAMED
        named = ", ".join(waiting[:NAMED]) + (f" and {more:,} more" if more > 0 else "")
        lines.append(Text(f"needs a human: {named}", style="bold red"))
    if state.max_usd is not None:
        lines.append(Text(spent_words(state.spent_usd, state.max_usd)))
    if state.paused:
        lines.append(Text(f"paused: {state.paused}: no new session starts; running ones stop "
                          "after their turn", style="bold red"))
    return lines


def human_line(target: str, row: UnitRow, link: str | None) -> str:
    """One line a person can act on (or a desktop notifier can show) for a unit that waits;
    `target` is what the commands name: the project folder where it is known, else its id."""
    if row.status == "review":
        what = (f"{row.unit_id} waits for review: `devloop review {target} {row.unit_id} "
                "--approve` or `--changes TEXT`")
    else:
        why = row.reason or row.blocked_reason or "blocked"  # in full: said once
        what = (f"{row.unit_id} is blocked ({why}): `devloop unblock {target} {row.unit_id} "
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
                target = shlex.quote(state.folder) if state.folder else state.pid
                lines.append(human_line(target, row, self.link(row.unit_id)))
        return lines


class Screen:
    """A run's live view on its console: drawn again when what it shows changed, at most
    every `every_s` (a frame costs the same whatever changed, and a person reads no
    faster), with the lines for people of each look printed above it together, in one
    print (each print draws the view again)."""

    def __init__(self, live: Live, notices: HumanNotices,
                 every_s: float = FRAME_EVERY_S) -> None:
        self.live, self.notices, self.every_s = live, notices, every_s
        self.footer: str | None = None  # the footer drawn last
        self.pending = False  # a change not drawn yet
        self.drawn_at = float("-inf")

    def show(self, state: ProjectStatus, changed: bool, footer: str) -> None:
        """What one look found: draw it when due, and print its lines for people now."""
        lines = self.notices.new(state)
        self.pending = self.pending or changed or footer != self.footer
        now = time.monotonic()
        if not lines and not (self.pending and now - self.drawn_at >= self.every_s):
            return
        self.live.update(LiveView(state, footer=footer))
        if lines:
            self.live.console.print("\n".join(lines), markup=False, highlight=False)
            self.live.console.bell()  # a terminal flags the window: someone is needed
        else:
            self.live.refresh()
        self.footer, self.pending, self.drawn_at = footer, False, now
