"""The `devloop` command line (typer + rich): library commands that need no task queue."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Literal, NoReturn

import typer
from rich.console import Console
from rich.table import Table

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
sandbox_app = typer.Typer(no_args_is_help=True, help="Inspect what an agent can and cannot do.")
app.add_typer(sandbox_app, name="sandbox")
toolchain_app = typer.Typer(no_args_is_help=True, help="Stack toolchains (node, python).")
app.add_typer(toolchain_app, name="toolchain")

out = Console()
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_INVALID = 2
Role = Literal["coder", "tester"]


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
    except KeyError as exc:
        fail([exc.args[0]])
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


def main() -> None:
    """Console-script entry point."""
    app(prog_name="devloop")


if __name__ == "__main__":
    main()
