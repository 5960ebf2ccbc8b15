"""The library commands that need no task queue: validate, stub-llm, new, mutants,
assemble, report, and the contract, session, sandbox and toolchain groups."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, NoReturn

import typer
from rich.table import Table

from devloop.cli.project_arg import load_folder, missing_folder
from devloop.cli.terminal import EXIT_INVALID, err, fail, out
from devloop.core.artifacts import not_imported
from devloop.core.config import load_settings
from devloop.core.contracts import ContractMissingExports, hash_contract
from devloop.core.errors import Problem, ProjectInvalid
from devloop.core.models import Stack
from devloop.project.jsonfile import read_json
from devloop.project.load import summarize
from devloop.project.toolchain import ToolchainError, node_toolchain, python_toolchain
from devloop.safe.cachedir import CacheUntrusted, cache_root
from devloop.safe.safedir import Refused

if TYPE_CHECKING:  # the agent (and the model client's) modules: `session run`'s alone
    from devloop.agent.tools import ProgressEvent

commands = typer.Typer()  # the top-level ones; devloop/cli/commands.py adds them and the groups
contract_app = typer.Typer(no_args_is_help=True, help="Contract tools.")
session_app = typer.Typer(no_args_is_help=True, help="Run one agent session outside the fleet.")
sandbox_app = typer.Typer(no_args_is_help=True, help="Inspect what an agent can and cannot do.")
toolchain_app = typer.Typer(no_args_is_help=True, help="Stack toolchains (node, python).")

Role = Literal["coder", "tester"]
Llm = Literal["anthropic", "stub"]


def environment_failed(exc: Exception) -> NoReturn:
    """Print why this host cannot run sessions and exit: 2 for a cache dir someone else
    controls (the user's to fix, as bad input), else 1."""
    err.print(str(exc), markup=False)
    raise typer.Exit(EXIT_INVALID if isinstance(exc, CacheUntrusted) else 1) from exc


PROJECT_ARGUMENT = typer.Argument(metavar="PROJECT", help="The project folder.", show_default=False)


def project_argument(positional: str | None, option: Path | None, words: list[str]) -> Path:
    """The project folder from the first argument or --project (the older spelling).

    With --project given, a positional word is the first word of the command after `--`
    (click hands it to the first argument), so it goes back in front of `words`.
    """
    if option is not None:
        if positional is not None:
            words.insert(0, positional)
        return option
    if positional is None:
        fail([Problem("PROJECT", "argument", "missing",
                      "name the project folder first: `devloop ... DIR --unit ...`")])
    return Path(positional)


@commands.command()
def validate(project_dir: Annotated[Path, typer.Argument(help="The project folder.")]) -> None:
    """Check a project folder; print a summary, or one line per problem (exit 2)."""
    from devloop.store.snapshot import source_problems

    project = load_folder(project_dir)
    unfit, dropped = source_problems(project, load_settings().file_cap_bytes)
    if unfit:
        fail(unfit)
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
    for left in dropped:
        out.print(not_imported(left), markup=False, highlight=False)


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
    """Install a stack's toolchain once per machine into the cache dir (DEVLOOP_CACHE_DIR;
    default /var/cache/devloop for root, ~/.cache/devloop for anyone else)."""
    settings = load_settings()
    install = node_toolchain if stack == "node" else python_toolchain
    try:
        path = install(cache_root(settings))
    except ToolchainError as exc:
        err.print(str(exc), markup=False)
        raise typer.Exit(1) from exc
    out.print(f"{stack} toolchain: {path}")


@sandbox_app.command("exec")
def sandbox_exec_command(
    project_dir: Annotated[str | None, PROJECT_ARGUMENT] = None,
    command: Annotated[
        list[str] | None, typer.Argument(metavar="-- CMD...", help="The command, after --.")
    ] = None,
    unit: Annotated[str, typer.Option(help="The unit whose view to use.")] = "",
    role: Annotated[Role | None, typer.Option(help="coder or tester.")] = None,
    project_option: Annotated[
        Path | None, typer.Option("--project", help="The project folder (same as PROJECT).")
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Wall-clock limit in seconds.")] = None,
) -> None:
    """Run CMD in a role's sandboxed view, commit what it may write and write that back into
    the project folder; CMD's exit code, or 3 on a rejected write."""
    from devloop.cli.sandbox_exec import sandbox_exec
    from devloop.core.errors import SandboxUnavailable

    words = list(command or [])
    project = project_argument(project_dir, project_option, words)
    if (missing := missing_folder(project)) is not None:
        fail([missing])
    if not unit or role is None:
        fail([Problem("--unit" if not unit else "--role", "option", "missing",
                      "name the unit and the role: --unit ID --role coder|tester")])
    if not words:
        fail([Problem("CMD", "argument", "missing",
                      "put the command after --: `devloop sandbox exec DIR --unit U -- ls`")])
    try:
        report = sandbox_exec(
            project, unit, role, shlex.join(words), load_settings(), timeout_s=timeout
        )
    except ProjectInvalid as exc:
        fail(exc.problems)
    except SandboxUnavailable as exc:
        environment_failed(exc)
    obs, outcome = report.observation, report.outcome
    sys.stdout.write(obs.stdout)
    sys.stderr.write(obs.stderr)
    if obs.timed_out:
        err.print(f"timed out after {timeout or load_settings().command_timeout_s:.0f} s")
    for violation in outcome.violations:
        err.print(f"rejected: {violation}", markup=False)
    if outcome.committed:
        where = f"; written to {project}" if report.written_back else ""
        err.print(
            f"committed: {', '.join(outcome.committed)} (unit version {outcome.version}){where}",
            markup=False,
        )
    for note in report.notes:
        err.print(note, markup=False)
    raise typer.Exit(report.exit_code)


@sandbox_app.command("limits")
def sandbox_limits() -> None:
    """Where each limit on a sandboxed command holds on this host (a cgroup, or only an
    rlimit per process), and the system calls its seccomp filter denies."""
    from devloop.core.errors import SandboxUnavailable
    from devloop.sandbox.base import default_limits
    from devloop.sandbox.cgroups import describe, where_caps_hold
    from devloop.sandbox.syscalls import filter_bpf, summary

    limits = default_limits(load_settings())
    lines = describe(where_caps_hold(), limits.memory_bytes, limits.processes)
    lines.append(
        f"per process: {limits.data_bytes // 2**20} MiB of writable memory (RLIMIT_DATA), "
        f"{limits.file_bytes // 2**20} MiB per file written (RLIMIT_FSIZE), {limits.cpu_s} s "
        f"of CPU (RLIMIT_CPU); /tmp: a private {limits.tmp_bytes // 2**20} MiB tmpfs"
    )
    for line in [*lines, *summary()]:
        out.print(line, markup=False)
    try:
        filter_bpf()
    except SandboxUnavailable as exc:
        err.print(str(exc), markup=False)
        raise typer.Exit(1) from exc


@session_app.command("run")
def session_run(
    project_dir: Annotated[str | None, PROJECT_ARGUMENT] = None,
    unit: Annotated[str, typer.Option(help="The unit.")] = "",
    role: Annotated[Role | None, typer.Option(help="coder or tester.")] = None,
    project_option: Annotated[
        Path | None, typer.Option("--project", help="The project folder (same as PROJECT).")
    ] = None,
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
    from devloop.roles.debug_session import SessionRefused, run_debug_session

    extra: list[str] = []
    project = project_argument(project_dir, project_option, extra)
    if extra:
        fail([Problem(extra[0], "argument", "unexpected", "name the project once: PROJECT or "
                      "--project")])
    if (missing := missing_folder(project)) is not None:
        fail([missing])
    if not unit or role is None:
        fail([Problem("--unit" if not unit else "--role", "option", "missing",
                      "name the unit and the role: --unit ID --role coder|tester")])
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
            out.print(f"  {tool_line(event.detail)}", highlight=False, markup=False)

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
    except (ProjectInvalid, SessionRefused) as exc:
        fail(exc.problems)
    print(output.model_dump_json(indent=2, by_alias=True))


def tool_line(detail: dict[str, object]) -> str:
    """`Write code/cart.py: ok` (the path a file tool acted on, printable characters only)."""
    mark = "error" if detail.get("error") else "ok"
    path = detail.get("path")
    shown = "".join(ch if ch.isprintable() else "?" for ch in str(path))[:160] if path else ""
    return f"{detail.get('name')}{' ' + shown if shown else ''}: {mark}"


@commands.command("stub-llm")
def stub_llm(
    script: Annotated[
        Path | None, typer.Option(help="YAML script of scripted turns (docs/stub-script.md).")
    ] = None,
    # Not 8765, the console's: both on one machine is how the stub is used.
    port: Annotated[int, typer.Option(help="Port to listen on (0 = any free port).")] = 8766,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    relay: Annotated[
        Path | None, typer.Option(help="Instead of a script: write each request to a file in "
                                       "this directory and serve the answer written for it "
                                       "(docs/playing-the-model.md).")
    ] = None,
    answer_timeout: Annotated[
        float, typer.Option(min=1, help="With --relay: seconds a request waits for its answer.")
    ] = 300.0,
) -> None:
    """Serve the Messages-API stub: point ANTHROPIC_BASE_URL at the printed URL."""
    from devloop.llm.stub import ScriptInvalid, StubServer, serve_forever
    from devloop.llm.stub.relay import RelayDesk
    from devloop.safe.private import NotPrivate

    if (script is None) == (relay is None):
        fail([Problem("stub-llm", "--script/--relay", "give exactly one",
                      "--script FILE serves scripted turns; --relay DIR lets you answer")])
    desk = None
    if relay is not None:
        try:
            desk = RelayDesk(relay, answer_timeout,
                             announce=lambda line: out.print(line, markup=False, highlight=False))
        except NotPrivate as exc:
            fail([str(exc)])

    def ready(stub: StubServer) -> None:
        url = stub.base_url
        out.print(url, highlight=False)
        if desk is not None:
            where = shlex.quote(str(desk.files.root))
            out.print(f"relay: requests are filed in {where}, each waits {answer_timeout:g}s for "
                      f"its answer; point a run at it: `export ANTHROPIC_BASE_URL={url} "
                      f"ANTHROPIC_API_KEY=relay`, then run with --llm anthropic; read the next "
                      f"request: `devloop relay show {where} --wait 600`",
                      markup=False, highlight=False)

    try:
        serve_forever(script, host, port, on_ready=ready, desk=desk)
    except ScriptInvalid as exc:
        fail(exc.problems)


@commands.command()
def new(
    project_dir: Annotated[Path, typer.Argument(help="The folder to create (new or empty).")],
    spec: Annotated[
        Path,
        typer.Option("--from", help="The project spec YAML: company_id, project_id, stack, "
                     "units (id, kind, depends_on, exports, consumes, acceptance); every key "
                     "in docs/spec-yaml.md, samples in examples/*/spec.yaml."),
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
        out.print(f"try it: devloop run {shlex.quote(str(report.root))} --llm stub",
                  markup=False)


@commands.command()
def mutants(
    project_dir: Annotated[Path, typer.Argument(help="The project folder (after `devloop run`).")],
    unit: Annotated[
        list[str] | None, typer.Option(help="A unit to measure (repeat it); default: every "
                                            "python unit with tests.")
    ] = None,
    sample: Annotated[int, typer.Option(min=1, max=200, help="Mutants per unit, at most.")] = 8,
) -> None:
    """Measure each python unit's mutation score: the share of small changes of its code
    that its tests notice (written to agent-state/mutation.json; the report shows it)."""
    from devloop.core.errors import SandboxUnavailable
    from devloop.roles.mutation import measure_folder
    from devloop.runners import PytestRunner
    from devloop.sandbox import BwrapSandbox
    from devloop.upstream.folder import folder_upstream

    project = load_folder(project_dir)
    python = [
        u.id for u in project.units.units
        if (u.stack or project.units.stack) == "python"
        and (project_dir / "units" / u.id / "tests").is_dir()
    ]
    wanted = list(unit or python)
    if unknown := [u for u in wanted if u not in python]:
        fail([Problem("--unit", "option", f"{unknown[0]!r} is not a python unit with tests",
                      f"use one of: {', '.join(python) or '(none yet: run the project first)'}")])
    settings = load_settings()

    @contextmanager
    def runner_for(unit_id: str) -> Iterator[PytestRunner]:
        upstream = folder_upstream(project, unit_id, settings)  # its dependencies' code
        try:
            yield PytestRunner(sandbox, venv, upstream=upstream)
        finally:
            upstream.close()

    try:
        sandbox, venv = BwrapSandbox(settings), python_toolchain(cache_root(settings))
        scores = measure_folder(project_dir, wanted, runner_for, settings, n=sample)
    except (SandboxUnavailable, ToolchainError) as exc:
        environment_failed(exc)
    table = Table("unit", "score", "killed", "survived", title="mutation score")
    for unit_id, score in scores.items():
        shown = "-" if score.score is None else f"{score.score:.2f}"
        table.add_row(unit_id, shown, f"{score.killed}/{score.run} of {score.sites}",
                      "; ".join(score.survived[:3]))
    out.print(table)


@commands.command()
def assemble(
    project_dir: Annotated[Path, typer.Argument(help="The project folder (after `devloop run`).")],
    out_dir: Annotated[Path, typer.Argument(metavar="OUT", help="Where to write the program "
                                            "(a new or empty directory).")],
) -> None:
    """Write the passed units as one program per stack (a python package tree, a node app
    whose be units share one Express server) and smoke-check it in the sandbox."""
    from devloop.core.errors import SandboxUnavailable
    from devloop.sandbox import BwrapSandbox
    from devloop.upstream.assemble import assemble as build
    from devloop.upstream.assemble import smoke_check

    project = load_folder(project_dir)
    if out_dir.is_symlink():
        fail([Problem(str(out_dir), "OUT", "is a symbolic link: DevLoop writes nothing "
                      "through a link", "name a new directory")])
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        fail([Problem(str(out_dir), "OUT", "exists and is not an empty directory",
                      "name a new directory (or empty this one)")])
    stacks = {project.stack_of(u.id) for u in project.units.units}
    settings = load_settings()
    try:
        node_modules = (node_toolchain(cache_root(settings)) / "node_modules"
                        if "node" in stacks else None)
        venv = python_toolchain(cache_root(settings)) if "python" in stacks else None
        try:
            assembly = build(project, out_dir, node_modules)
        except Refused as exc:  # something planted in OUT since it was found empty
            fail([Problem(str(out_dir / exc.path), "OUT", f"{exc.reason}: DevLoop writes "
                          "nothing through a link", "name a new directory")])
        smoke_check(assembly, BwrapSandbox(settings), settings, venv, node_modules)
    except (SandboxUnavailable, ToolchainError) as exc:
        environment_failed(exc)
    made = "; ".join(f"{stack} ({', '.join(units)})" for stack, units in assembly.units.items())
    typer.echo(f"assembled into {out_dir}: {made or 'nothing (no unit has passed)'}")
    for unit, why in assembly.left_out.items():
        typer.echo(f"left out: {unit}: {why}")
    for stack, obs in assembly.smoke.items():
        lines = [ln for ln in obs.stdout.splitlines() if ln.strip()]
        if obs.exit_code == 0:
            typer.echo(f"smoke check ({stack}): {lines[-1] if lines else 'passed'}")
        else:
            tail = (obs.stdout + obs.stderr).strip()[-2000:]
            typer.echo(f"smoke check ({stack}) failed (exit {obs.exit_code}):\n{tail}", err=True)
    where = shlex.quote(str(out_dir))
    if "python" in assembly.units:
        typer.echo(f"check it: cd {where}/python && python3 smoke.py")
    if "node" in assembly.units:
        typer.echo(f"run it:   cd {where}/node && npm install && npm start")
    typer.echo(f"how to run it: {out_dir / 'README.md'}")
    if not assembly.ok:
        raise typer.Exit(1)


@commands.command()
def report(
    project_dir: Annotated[Path, typer.Argument(help="The project folder (after `devloop run`).")],
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Where to write the HTML page (default: "
                     "report.html in the project folder)."),
    ] = None,
) -> None:
    """Write one static HTML page of a run: unit DAG, step timeline, costs, bugs, hints."""
    from devloop.report import write_report

    target = output or project_dir / "report.html"
    try:
        path = write_report(project_dir, target)
    except ProjectInvalid as exc:
        fail(exc.problems)
    except Refused as exc:  # a link or fifo where the page goes (a folder someone else wrote)
        where = target if exc.path == target.name else target.parent
        fail([Problem(str(where), "-o", f"{exc.reason}: DevLoop writes nothing through a "
                      "link", "remove it, or pass -o with a path of your own")])
    out.print(f"report written to {path}", markup=False)

