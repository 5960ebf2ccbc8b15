"""`devloop run`: Redis, workers, (stub, Flower), enqueue, watch, export, stop what it started."""

from __future__ import annotations

import contextlib
import os
import shlex
import time
import traceback
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from devloop.cli.project_arg import missing_folder
from devloop.cli.run.children import CrashLoop, RunChildren, start_children
from devloop.cli.run.live_view import HumanNotices, LiveView, Screen, epilogue
from devloop.cli.run.people import (
    apply_controls,
    paused_exit,
    start_console,
    start_notifier,
    waits_in_console,
    webhook_settings_problem,
)
from devloop.cli.run.procs import flower_auth_problem
from devloop.console.listen import Listener, ListenFailed, listening
from devloop.core.artifacts import not_imported
from devloop.core.config import Settings, load_settings
from devloop.core.errors import DevLoopError, Problem, ProjectInvalid
from devloop.core.suggest import unknown
from devloop.fleet.control import steps_running
from devloop.fleet.dispatch import (
    enqueue_project,
    overdue_followups,
    reconcile,
    resume_blocked,
)
from devloop.fleet.failures import one_line
from devloop.fleet.livestatus import LiveStatus
from devloop.fleet.marks import STUB, export_marks
from devloop.fleet.messages import Dispatch
from devloop.fleet.queue import QueueUnreachable, TaskQueue
from devloop.fleet.respec import apply_changes
from devloop.fleet.scripted import Rebuilt, run_scripted_again
from devloop.fleet.status import ProjectStatus, mark_run, project_status, scripted
from devloop.fleet.sync import FolderSync
from devloop.fleet.webhook import unit_page
from devloop.llm.base import load_prices, price_of, unpriced_fault
from devloop.project.lastrun import Given, RunChoices, carry_on, recall, remember, script_path
from devloop.project.load import Project, load_project
from devloop.project.runlock import FolderBusy, folder_lock
from devloop.safe.cachedir import cache_problem
from devloop.safe.private import write_private
from devloop.server.embedded import NotPrivate, private_state_dir, redis_endpoint
from devloop.server.redis_server import RedisServerError, server_build
from devloop.server.redis_urls import redact
from devloop.server.supervisor import Received, interrupt_on
from devloop.store import RedisStore
from devloop.store.base import StoreError, StoreUnavailable
from devloop.store.snapshot import source_problems

EXIT_OK, EXIT_BLOCKED, EXIT_INVALID, EXIT_FAILED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # Ctrl-C (143 for SIGTERM, 129 for SIGHUP: 128 + the signal)


@dataclass(frozen=True)
class RunOptions:
    """What `devloop run` was asked to do."""

    project_dir: Path
    workers: int = 2
    llm: str = "anthropic"
    script: Path | None = None
    flower: bool = False
    flower_port: int = 5555
    poll_s: float = 0.5
    timeout_s: float | None = None  # give up (exit 3) after this long; tests set it
    reruns: tuple[str, ...] = ()  # passed or blocked units to run again (--rerun)
    epilogue: bool = True  # end with where the files are and the report command
    max_usd: float | None = None  # the project's spend cap (else DEVLOOP_PROJECT_MAX_USD)
    console: bool = False  # serve the console beside the run
    console_host: str = "127.0.0.1"
    console_port: int | None = None  # None: DEVLOOP_CONSOLE_PORT, or a free one if taken
    console_port_preferred: int | None = None  # the last run's: taken, another one is chosen
    resume: bool = False  # `devloop resume`: also carry on units a person cancelled
    carried: tuple[str, ...] = ()  # flags taken from the folder's last run (said at start)

    def choices(self) -> RunChoices:
        """What the next printed `devloop run DIR` should carry on with."""
        return RunChoices(
            llm="stub" if self.llm == "stub" else "anthropic",
            script=str(self.script.resolve()) if self.script else None,
            workers=self.workers, console=self.console, console_host=self.console_host,
            console_port=self.console_port or self.console_port_preferred,
            flower=self.flower, flower_port=self.flower_port,
        )


def options_for(project_dir: Path, given: Given, **rest: Any) -> RunOptions:
    """RunOptions for a command on project_dir: what was given, else what its last run
    used (`rest`: the options that are never remembered, such as --timeout)."""
    last = recall(project_dir) if missing_folder(project_dir) is None else None
    choices, carried = carry_on(given, last, project_dir)
    # A port the last run used is a preference: if it is taken now, another is chosen (a
    # port given on this command line is refused when taken).
    return RunOptions(
        project_dir, choices.workers, choices.llm, script_path(choices), choices.flower,
        choices.flower_port, console=choices.console, console_host=choices.console_host,
        console_port=given.console_port, console_port_preferred=choices.console_port,
        carried=tuple(carried), **rest,
    )


def _problems(options: RunOptions, settings: Settings) -> list[Problem]:
    """Input errors to report before anything starts."""
    if (missing := missing_folder(options.project_dir)) is not None:
        return [missing]
    try:
        project = load_project(options.project_dir)
    except ProjectInvalid as exc:
        return exc.problems
    unfit, _ = source_problems(project, settings.file_cap_bytes)
    if unfit:
        return unfit
    known = [u.id for u in project.units.units]
    unknown_units = [unknown("--rerun", unit, "unit", unit, known)
                     for unit in options.reruns if unit not in known]
    if unknown_units:
        return unknown_units
    if (webhook := webhook_settings_problem(settings)) is not None:
        return [webhook]
    auth = settings.flower_auth.get_secret_value() if settings.flower_auth else ""
    if options.flower and auth and (why := flower_auth_problem(auth)):
        return [Problem("DEVLOOP_FLOWER_AUTH", "environment", why, "set it to user:password")]
    try:
        if price_of(settings.model, load_prices()) is None:
            return [Problem("DEVLOOP_MODEL", "environment", *unpriced_fault(settings.model))]
    except DevLoopError as exc:  # DEVLOOP_PRICES_JSON unreadable; its message holds the fix
        why, _, fix = str(exc).removeprefix("DEVLOOP_PRICES_JSON: ").partition("; fix: ")
        return [Problem("DEVLOOP_PRICES_JSON", "environment", why, fix)]
    if options.llm == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        return [
            Problem(
                "ANTHROPIC_API_KEY",
                "environment",
                "not set",
                "export your Anthropic API key, or run with --llm stub --script FILE",
            )
        ]
    if options.llm == "stub":
        script = options.script or options.project_dir / "stub.yaml"
        if not script.is_file():
            return [
                Problem(
                    str(script),
                    "file",
                    "not found",
                    "pass --script FILE with the scripted turns (docs/stub-script.md)",
                )
            ]
        from devloop.llm.stub import Script, ScriptInvalid

        try:
            Script.load(script)
        except ScriptInvalid as exc:
            return exc.problems
    # The workers run every session from the cache: one someone else controls is refused now.
    cache = cache_problem(settings)
    return [cache] if cache is not None else []


class GaveUp(DevLoopError):
    """The run stops before every unit is done; the message names why (exit 3)."""


def run_project(
    options: RunOptions, settings: Settings, queue: TaskQueue, console: Console | None = None
) -> int:
    """Run the project to the end (or resume it); return the exit code.

    0 every unit passed, 1 some unit blocked, 2 bad input, 3 gave up (every worker died,
    the timeout, the environment cannot run sessions, Redis went away), 4 paused by its
    budget, 5 cancelled, 128 + a signal: never a traceback. Precedence (docs/running.md): 2,
    a signal, 3, 0, the pause (5 or 4, even with units blocked), 1.
    """
    console = console or Console()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    problems = _problems(options, settings)
    if problems:
        for problem in problems:
            err.print(str(problem), markup=False)
        return EXIT_INVALID
    try:
        with folder_lock(options.project_dir), ExitStack() as held:  # one live run per folder
            remember(options.project_dir, options.choices())  # what printed commands carry on
            listener = None
            if options.console:  # bound now: the link is printed only for a socket of ours
                listener = held.enter_context(listening(
                    options.console_host,
                    options.console_port or options.console_port_preferred
                    or settings.console_port,
                    explicit=options.console_port is not None, command="devloop run",
                    option="--console-port"))
            return _run_held(options, settings, queue, console, err, listener)
    except (FolderBusy, NotPrivate, ListenFailed) as refused:  # nothing ran yet
        err.print(str(refused), markup=False)
        return EXIT_INVALID


def _run_held(
    options: RunOptions, settings: Settings, queue: TaskQueue, console: Console, err: Console,
    listener: Listener | None,
) -> int:
    """run_project once the folder's run lock (and the console's port) is held."""
    received = Received()
    try:
        with interrupt_on() as received:  # Ctrl-C, SIGTERM, SIGHUP: children stopped, in order
            final = _run(options, settings, queue, console, listener)
    except BaseException as stopped:
        # An interrupt may surface as another error (raised mid-import, Python wraps it).
        if received.exit_code is not None or isinstance(stopped, KeyboardInterrupt):
            console.print()
            notes = getattr(stopped, "__notes__", None) or [
                f"interrupted; run `devloop run {shlex.quote(str(options.project_dir))}` "
                "again to resume"
            ]
            err.print(notes[-1], markup=False)
            return received.exit_code or EXIT_INTERRUPTED
        if not isinstance(stopped, Exception):
            raise
        return _gave_up(stopped, options, console, err)
    for line in epilogue(final, str(options.project_dir), files=options.epilogue):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    paused = paused_exit(final, options.project_dir, console)
    if paused is not None:
        return paused
    return EXIT_OK if final.all_passed else EXIT_BLOCKED


def _gave_up(error: Exception, options: RunOptions, console: Console, err: Console) -> int:
    """Say why the run gave up, in one line (a bug of ours: its traceback in a file)."""
    console.print()  # the live table's last line
    if isinstance(error, NotPrivate):  # .devloop/ or its data not the user's own: input
        err.print(str(error), markup=False)
        return EXIT_INVALID
    if isinstance(error, GaveUp):
        err.print(f"devloop run: gave up: {error}", markup=False)
    elif isinstance(error, StoreError | QueueUnreachable):
        err.print(f"devloop run: gave up: Redis went away ({one_line(error)}); "
                  f"run `devloop run {shlex.quote(str(options.project_dir))}` again to "
                  "resume", markup=False)
    elif isinstance(error, DevLoopError | OSError):
        err.print(f"devloop run: gave up: {one_line(error)}", markup=False)
    else:
        try:
            where = f"traceback in {write_traceback(options.project_dir)}"
        except (NotPrivate, OSError):
            err.print(traceback.format_exc(), markup=False)
            where = "traceback above"
        err.print(f"devloop run: gave up: unexpected {one_line(error)} ({where})",
                  markup=False)
    return EXIT_FAILED


def _mid_flight(store: RedisStore, pid: str, project_dir: Path) -> str:
    """What an interrupted run says: the units it leaves mid-flight, and how to go on."""
    state = project_status(store, pid)
    moving = sum(u.status not in ("passed", "blocked", "blocked_upstream", "pending")
                 for u in state.units)
    return (f"interrupted: {moving} unit(s) mid-flight, {state.count('passed')} of "
            f"{len(state.units)} passed; run `devloop run {shlex.quote(str(project_dir))}` "
            "again to resume")


def write_traceback(project_dir: Path) -> Path:
    """The current exception's traceback in PROJECT/.devloop/run-error.log (0600): a link or
    fifo a cloned folder planted there is replaced, never written through."""
    log = private_state_dir(project_dir) / "run-error.log"
    write_private(log, traceback.format_exc().encode())
    return log


def _start_line(settings: Settings, workers: int) -> str:
    """What the run starts: the embedded server (named with its build) and the workers."""
    if settings.redis_url:
        return f"starting {workers} worker(s) on the Redis at {redact(settings.redis_url)}..."
    return f"starting {server_build()} and {workers} worker(s)..."


def _run(
    options: RunOptions, settings: Settings, queue: TaskQueue, console: Console,
    listener: Listener | None,
) -> ProjectStatus:
    """Start what the run needs, enqueue (or resume), watch to the end, stop what it started."""
    project_dir = options.project_dir.resolve()
    state_dir = private_state_dir(project_dir)  # 0700: logs, and the embedded Redis
    if options.carried:
        console.print(_carried_words(options.carried), markup=False, highlight=False)
    console.print(_start_line(settings, options.workers), highlight=False)
    with ExitStack() as stack:
        endpoint = stack.enter_context(redis_endpoint(project_dir, settings))
        env = {**os.environ, "DEVLOOP_REDIS_URL": endpoint.celery_url}
        if options.llm == "stub":
            from devloop.llm.stub import StubServer

            stub = stack.enter_context(StubServer(options.script or project_dir / "stub.yaml"))
            env.update(ANTHROPIC_BASE_URL=stub.base_url, ANTHROPIC_API_KEY="stub")
        queue.connect(endpoint.celery_url)
        store = RedisStore.watching(endpoint.url, file_cap_bytes=settings.file_cap_bytes)
        stack.callback(store.close)
        project = load_project(project_dir)
        earlier = _ran_before(store, project)
        report, dispatches = enqueue_project(store, project_dir)
        for left in report.dropped:
            console.print(not_imported(left), markup=False, highlight=False)
        dispatches += _start_notes(store, project, options, console, earlier)
        try:
            if endpoint.server is not None:
                # This run started the Redis: no worker of it lives yet, so every lease there
                # is a dead worker's (a run killed mid-step) and must not hold its unit back.
                store.drop_leases(report.pid)
                # And when it stops, its workers are dead: their leases too, so `devloop
                # status` shows what they left mid-flight as interrupted at once.
                stack.callback(_drop_leases, endpoint.url, report.pid)
            # Before any worker runs: a pause from the last run is lifted, the cap set.
            dispatches += apply_controls(store, report.pid, options.max_usd, options.resume,
                                         settings)
            children = start_children(
                options.workers, env, endpoint, state_dir, settings, console,
                flower_port=options.flower_port if options.flower else None,
            )
            stack.callback(children.stop)
            if listener is not None:
                start_console(children, endpoint, state_dir, project_dir, listener, settings,
                              console)
            notifier = start_notifier(store, report.pid, settings)
            if notifier is not None:
                stack.callback(notifier.stop)
            # Units an earlier, interrupted run left mid-flight have no live task now, and
            # units it blocked for the model or the infrastructure (not their code) resume.
            queue.send(dispatches + resume_blocked(store, report.pid)
                       + reconcile(store, report.pid, 0))
            return _watch(store, queue, report.pid, project_dir, options, console, children)
        except KeyboardInterrupt as stopped:
            # Said while Redis is still up, through a client of its own: the signal may have
            # cut the store's connection off in the middle of a reply.
            with contextlib.suppress(Exception):
                fresh = RedisStore.from_url(endpoint.url)
                try:
                    stopped.add_note(_mid_flight(fresh, report.pid, options.project_dir))
                finally:
                    fresh.close()
            raise


def _carried_words(carried: tuple[str, ...]) -> str:
    """The line that says which options came from the folder's last run."""
    line = f"as this folder's last run: {' '.join(carried)}"
    if "--llm stub" in carried:
        line += " (`--llm anthropic` runs Claude instead)"
    return line


def _drop_leases(url: str, pid: str) -> None:
    """Drop pid's leases through a client of its own (a signal may have cut the run's)."""
    with contextlib.suppress(Exception):  # Redis may be gone with the run
        fresh = RedisStore.from_url(url)
        try:
            fresh.drop_leases(pid)
        finally:
            fresh.close()


def _ran_before(store: RedisStore, project: Project) -> bool:
    """Whether an earlier run moved any unit of the project (this one then resumes)."""
    if not store.has_project(project.pid):
        return False
    states = store.get_states(project.pid, [u.id for u in project.units.units])
    return any(state.status != "pending" for state in states.values())


def _start_notes(
    store: RedisStore, project: Project, options: RunOptions, console: Console, earlier: bool
) -> list[Dispatch]:
    """Note the model in use, run again what --rerun names and what changed since it passed,
    and say so (and that the run resumes); the chains that starts."""
    every_run_scripted = scripted(store, project.pid)  # before this run counts
    mark_run(store, project.pid, options.llm)
    folder = str(options.project_dir)
    again = Rebuilt()
    if options.llm == STUB:
        export_marks(store, project.pid, every_run_scripted)  # a stub run resumes them
    else:
        # A scripted green proves the script, not the code: a real model builds it again.
        again = run_scripted_again(store, project, every_run_scripted)
    asked = tuple(u for u in options.reruns if u not in again.units)  # they run again anyway
    dispatches, lines = apply_changes(store, project, folder, asked)
    dispatches, lines = again.sent + dispatches, again.lines + lines
    if earlier:
        state = project_status(store, project.pid)
        passed = state.count("passed")
        lines.insert(0, f"resuming: {passed} passed, {len(state.units) - passed} to go")
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return dispatches


def _watch(
    store: RedisStore,
    queue: TaskQueue,
    pid: str,
    project_dir: Path,
    options: RunOptions,
    console: Console,
    children: RunChildren,
) -> ProjectStatus:
    """Show the live table, export as results land, keep the children running, return the
    final status (GaveUp: not).

    Each look reads only what moved (LiveStatus) and writes only what changed (FolderSync);
    the view is drawn again only when what it shows changed (at most once a second), and
    the lines for people of a look are printed together, one redraw for all of them.
    """
    settings = load_settings()
    started = last_reconcile = time.monotonic()
    grace = settings.reconcile_grace_s
    folder = str(options.project_dir)  # as the user wrote it, for the commands shown
    tracker = LiveStatus(store, pid, folder=folder)
    state = tracker.load().status
    sync = FolderSync(store, pid, project_dir)
    sync.start(tracker)
    unreachable_since: float | None = None
    notices = HumanNotices(lambda unit: unit_page(
        tracker.setting.control.console_url if tracker.setting else None, pid, unit))
    with Live(LiveView(state, footer=children.summary()), console=console,
              auto_refresh=False, transient=False, vertical_overflow="visible") as live:
        screen = Screen(live, notices)
        while True:
            try:
                children.check()
            except (CrashLoop, RedisServerError) as broken:
                raise GaveUp(str(broken)) from None
            try:
                look = tracker.poll()
                state = look.status
                sync.sync(tracker, look)
                screen.show(state, look.changed, children.summary())
                if state.finished and not waits_in_console(state, options.console):
                    break
                if state.paused and not steps_running(store, pid):
                    break  # paused (budget, cancel) and every session stopped after its turn
                if state.environment_error:
                    store.export(pid, project_dir, as_source=True)
                    raise GaveUp(
                        f"the environment cannot run sessions: {state.environment_error}"
                    )
                if time.monotonic() - last_reconcile > max(5.0, grace / 2):
                    # Tasks lost to a dead worker or a broker restart come back here.
                    queue.send(reconcile(store, pid, grace))
                    last_reconcile = time.monotonic()
                unreachable_since = None
            except (StoreUnavailable, QueueUnreachable) as lost:
                # A Redis restart, or a shared one that went away: wait for it a while.
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > settings.redis_wait_s:
                    raise GaveUp(f"Redis unreachable for {settings.redis_wait_s:.0f} s "
                                 f"({one_line(lost)}); run again to resume") from None
                children.note = f"Redis unreachable: {one_line(lost)}; waiting"
                live.update(LiveView(state, footer=children.summary()), refresh=True)
            if options.timeout_s and time.monotonic() - started > options.timeout_s:
                raise GaveUp(f"timed out after {options.timeout_s:.0f} s; run again to resume")
            time.sleep(options.poll_s)
        if state.finished:
            # A worker that died right after a unit's last transition left its follow-up
            # (notes to promote, marks to export): done now, not a grace period later.
            queue.send(overdue_followups(store, pid, grace_s=0))
        # The end is told from one look after everything stopped: a step that ended after
        # the look that ended the watch (its model calls counted) is in it.
        state = project_status(store, pid, folder=folder)
        live.update(LiveView(state, footer=children.summary()))  # drawn as the view stops
    console.print()
    sync.finish(state.scripted)  # exact at the end (decisions race to write the marks)
    return state
