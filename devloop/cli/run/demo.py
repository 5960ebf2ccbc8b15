"""`devloop demo`: a bundled example through the whole fleet against its scripted turns."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from rich.console import Console

from devloop.cli.run.project_run import RunOptions, run_project
from devloop.core.config import Settings
from devloop.core.money import usd
from devloop.fleet.queue import TaskQueue
from devloop.project.resources import data_dir
from devloop.report import gather, write_report
from devloop.report.data import ReportData
from devloop.report.tables import cost_table
from devloop.safe.safedir import Dir, Refused

EXAMPLES = data_dir("examples")


def examples() -> list[str]:
    """The bundled examples that have scripted turns."""
    return sorted(p.parent.name for p in EXAMPLES.glob("*/stub.yaml"))


def copy_example(source: Path, dest: Path) -> None:
    """Copy a bundled example to dest, a new folder: never through a link met on the way
    there (Refused), nor into a folder that already exists (FileExistsError)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with Dir.open(dest.parent) as parent:
        os.mkdir(dest.name, 0o755, dir_fd=parent.fd)
        with parent.opendir(dest.name) as copy:
            for path in sorted(source.rglob("*")):
                if path.is_file():
                    copy.write_atomic(path.relative_to(source).as_posix(), path.read_bytes())


def run_demo(name: str, workers: int, settings: Settings, console: Console,
             out_root: Path, queue: TaskQueue) -> int:
    """Copy the example to a fresh folder, run it with the stub, and summarize the run."""
    source = EXAMPLES / name
    dest = out_root / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        copy_example(source, dest)
    except (Refused, FileExistsError) as exc:
        why = exc.reason if isinstance(exc, Refused) else "exists already"
        Console(stderr=True, soft_wrap=True).print(
            f"{dest.parent}: --out-dir: {why}; fix: pass --out-dir with a folder of your own "
            "(DevLoop writes nothing through a link)", markup=False)
        return 2
    console.print(f"[bold]DevLoop demo[/bold]: {name} ({source}) copied to {dest}")
    console.print("The model's turns are scripted (stub.yaml); workers, sandbox, Redis and the "
                  "tests are real.\n")
    # The demo says where the files and the report are itself, after writing the report.
    code = run_project(RunOptions(dest, workers=workers, llm="stub", epilogue=False), settings,
                       queue, console)
    report = write_report(dest, dest / "report.html")
    summarize(gather(dest), console)
    console.print(f"\nFiles: {dest}\nReport: {report}")
    console.print(
        "\nThe model turns above were scripted, to show the loop without an API key. "
        "To run a project with Claude:\n"
        f"  ANTHROPIC_API_KEY=... devloop run {shlex.quote(str(dest))} --llm anthropic"
    )
    return code


def summarize(data: ReportData, console: Console) -> None:
    """Units and attempts, each red -> green retry with its hint, bugs, tokens."""
    console.print("[bold]Summary[/bold]")
    for unit in data.units:
        console.print(f"  {unit.id}: {unit.status} after {unit.attempts} attempt(s)")
        red = [r for r in unit.runs if not r.ok and r.failures]
        green = [r for r in unit.runs if r.ok]
        for run in red[:1]:
            failure = run.failures[0]
            values = (f": expected {failure.expected}, got {failure.got}"
                      if failure.expected is not None or failure.got is not None else "")
            console.print(f"    red   {run.run_id}: {failure.test}{values}", highlight=False,
                          markup=False)
            console.print(f"          hint: {failure.hint}", highlight=False, markup=False)
            fix = next((d for d in unit.decisions if d.attempt == run.attempt + 1), None)
            if fix is not None:
                console.print(f"          reflection: {fix.last_cause}; {fix.this_fix}",
                              highlight=False, markup=False)
        if red and green:
            console.print(f"    green {green[-1].run_id}: {green[-1].summary.passed}/"
                          f"{green[-1].summary.total} tests passed", highlight=False)
    fixed = [b for b in data.bugs if b.status == "fixed"]
    console.print(f"  bugs: {len(data.bugs)} opened, {len(fixed)} fixed")
    tokens = sum(s.tokens for s in data.steps)
    _, total = cost_table(data)
    console.print(f"  tokens: {tokens:,} (scripted turns priced as claude-sonnet-4-6: "
                  f"{usd(total.cost_usd)})")
