"""The `devloop` command line (typer + rich): library commands that need no task queue."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from devloop.agent.tools import ProgressEvent
from devloop.config import load_settings
from devloop.contracts import ContractMissingExports, hash_contract
from devloop.errors import Problem, ProjectInvalid
from devloop.jsonfile import read_json
from devloop.models import Stack
from devloop.project import load_project, summarize
from devloop.toolchain import ToolchainError, node_toolchain, python_toolchain

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="DevLoop: a fleet of coding agents."
)
contract_app = typer.Typer(no_args_is_help=True, help="Contract tools.")
app.add_typer(contract_app, name="contract")
session_app = typer.Typer(no_args_is_help=True, help="Run one agent session outside the fleet.")
app.add_typer(session_app, name="session")
sandbox_app = typer.Typer(no_args_is_help=True, help="Inspect what an agent can and cannot do.")
app.add_typer(sandbox_app, name="sandbox")
toolchain_app = typer.Typer(no_args_is_help=True, help="Stack toolchains (node, python).")
app.add_typer(toolchain_app, name="toolchain")

out = Console()
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_INVALID = 2
Role = Literal["coder", "tester"]
Llm = Literal["anthropic", "stub"]


def fail(problems: list[Problem] | list[str]) -> NoReturn:
    """Print one line per problem on stderr and exit 2."""
    for problem in problems:
        err.print(str(problem), markup=False)
    raise typer.Exit(EXIT_INVALID)


@app.command()
def validate(project_dir: Annotated[Path, typer.Argument(help="The project folder.")]) -> None:
    """Check a project folder; print a summary, or one line per problem (exit 2)."""
    try:
        project = load_project(project_dir)
    except ProjectInvalid as exc:
        fail(exc.problems)
    info = summarize(project)
    table = Table(title=f"{info['project']}: valid", show_header=False, title_justify="left")
    table.add_row("units", str(info["units"]))
    table.add_row("kinds", ", ".join(f"{k} {n}" for k, n in sorted(info["kinds"].items())))
    table.add_row("stacks", ", ".join(f"{k} {n}" for k, n in sorted(info["stacks"].items())))
    table.add_row("dependency depth", str(info["depth"]))
    table.add_row("critical path", " -> ".join(info["critical_path"]))
    table.add_row("ready at start", ", ".join(info["roots"]))
    table.add_row("acceptance criteria", str(info["acceptance"]))
    if info["derived_specs"]:
        table.add_row("spec.json derived from SDD", ", ".join(info["derived_specs"]))
    out.print(table)


@contract_app.command("hash")
def contract_hash(
    file: Annotated[
        Path, typer.Argument(help="contract.json, or the JSON of a <pre data-contract>.")
    ],
) -> None:
    """Print `sha256:<16 hex>` for a contract JSON file."""
    data, problems = read_json(file, str(file))
    if problems:
        fail(problems)
    if not isinstance(data, dict):
        fail([Problem(str(file), "(top level)", "not a JSON object", 'write {"exports": ...}')])
    try:
        print(hash_contract(data))
    except ContractMissingExports:
        fail([Problem(str(file), "exports", "missing", 'add an "exports" object')])


@toolchain_app.command("install")
def toolchain_install(
    stack: Annotated[Stack, typer.Argument(help="node or python")],
) -> None:
    """Install a stack's toolchain once per machine into DEVLOOP_CACHE_DIR."""
    settings = load_settings()
    install = node_toolchain if stack == "node" else python_toolchain
    try:
        path = install(settings.cache_dir)
    except ToolchainError as exc:
        err.print(str(exc), markup=False)
        raise typer.Exit(1) from exc
    out.print(f"{stack} toolchain: {path}")


@sandbox_app.command("exec")
def sandbox_exec_command(
    command: Annotated[list[str], typer.Argument(help="The command, after --.")],
    project: Annotated[Path, typer.Option(help="The project folder.")],
    unit: Annotated[str, typer.Option(help="The unit whose view to use.")],
    role: Annotated[Role, typer.Option(help="coder or tester.")],
    timeout: Annotated[float | None, typer.Option(help="Wall-clock limit in seconds.")] = None,
) -> None:
    """Run CMD in a role's sandboxed view, commit what it may write; exit 3 on a rejected write."""
    from devloop.errors import SandboxUnavailable
    from devloop.sandbox_exec import sandbox_exec

    try:
        report = sandbox_exec(
            project, unit, role, shlex.join(command), load_settings(), timeout_s=timeout
        )
    except ProjectInvalid as exc:
        fail(exc.problems)
    except SandboxUnavailable as exc:
        err.print(str(exc), markup=False)
        raise typer.Exit(1) from exc
    obs, outcome = report.observation, report.outcome
    sys.stdout.write(obs.stdout)
    sys.stderr.write(obs.stderr)
    if obs.timed_out:
        err.print(f"timed out after {timeout or load_settings().command_timeout_s:.0f} s")
    for violation in outcome.violations:
        err.print(f"rejected: {violation}", markup=False)
    if outcome.committed:
        err.print(
            f"committed: {', '.join(outcome.committed)} (unit version {outcome.version})",
            markup=False,
        )
    raise typer.Exit(report.exit_code)


@session_app.command("run")
def session_run(
    project: Annotated[Path, typer.Option(help="The project folder.")],
    unit: Annotated[str, typer.Option(help="The unit.")],
    role: Annotated[Role, typer.Option(help="coder or tester.")],
    mode: Annotated[
        str, typer.Option(help="coder: implement|retry|resume; tester: test|retry|resume.")
    ] = "implement",
    llm: Annotated[Llm, typer.Option(help="Claude (ANTHROPIC_API_KEY) or the stub.")] = "anthropic",
    script: Annotated[
        Path | None, typer.Option(help="Stub script (default: DIR/stub.yaml).")
    ] = None,
    attempt: Annotated[int | None, typer.Option(help="Attempt number (default: inferred).")] = None,
) -> None:
    """Run one session on a unit, print its turns as they happen and its output at the end."""
    from devloop.debug_session import run_debug_session

    modes = {"coder": ("implement", "retry", "resume"), "tester": ("test", "retry", "resume")}
    if mode == "implement" and role == "tester":
        mode = "test"
    if mode not in modes[role]:
        fail(
            [
                Problem(
                    "--mode",
                    role,
                    f'"{mode}" is not a {role} mode',
                    f"use one of {', '.join(modes[role])}",
                )
            ]
        )

    def show(event: ProgressEvent) -> None:
        if event.kind == "turn":
            out.print(f"turn {event.turn}  ({event.tokens:,} tokens so far)", highlight=False)
        elif event.kind == "tool":
            mark = "error" if event.detail.get("error") else "ok"
            out.print(f"  {event.detail.get('name')}: {mark}", highlight=False)

    try:
        output = run_debug_session(
            project,
            unit,
            role,
            mode,
            load_settings(),
            llm=llm,
            script=script,
            attempt=attempt,
            emit=show,
        )
    except ProjectInvalid as exc:
        fail(exc.problems)
    print(output.model_dump_json(indent=2, by_alias=True))


@app.command("stub-llm")
def stub_llm(
    script: Annotated[
        Path, typer.Option(help="YAML script of scripted turns (docs/stub-script.md).")
    ],
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port).")] = 8765,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
) -> None:
    """Serve the Messages-API stub: point ANTHROPIC_BASE_URL at the printed URL."""
    from devloop.llm.stub import ScriptInvalid, serve_forever

    try:
        serve_forever(script, host, port, on_ready=lambda s: out.print(s.base_url, highlight=False))
    except ScriptInvalid as exc:
        fail(exc.problems)


@app.command()
def new(
    project_dir: Annotated[Path, typer.Argument(help="The folder to create (new or empty).")],
    spec: Annotated[
        Path, typer.Option("--from", help="The project spec YAML (units, contracts, acceptance).")
    ],
    force: Annotated[bool, typer.Option(help="Write into a non-empty folder.")] = False,
    script: Annotated[
        bool, typer.Option(help="Also write stub.yaml: scripted turns that pass every unit.")
    ] = True,
) -> None:
    """Scaffold a project in the seed layout from a compact YAML spec (exit 2 on a problem)."""
    from devloop.scaffold import SpecInvalid, scaffold

    try:
        report = scaffold(spec, project_dir, force=force, script=script)
    except SpecInvalid as exc:
        fail(exc.problems)
    out.print(f"{report.project_id}: {report.units} units written to {report.root}", markup=False)
    if report.script is not None:
        out.print(f"try it: devloop run {report.root} --llm stub", markup=False)


@app.command()
def report(
    project_dir: Annotated[Path, typer.Argument(help="The project folder (after `devloop run`).")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Where to write the HTML page.")
    ] = Path("report.html"),
) -> None:
    """Write one static HTML page of a run: unit DAG, step timeline, costs, bugs, hints."""
    from devloop.report import write_report

    try:
        path = write_report(project_dir, output)
    except ProjectInvalid as exc:
        fail(exc.problems)
    out.print(f"report written to {path}", markup=False)

