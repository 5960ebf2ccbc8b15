"""What `devloop run` adds for people: the project's controls at start (cap, pause), the
console as a supervised child, the webhook, and how a paused run ends."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from rich.console import Console

from devloop.cli.run.children import RunChildren
from devloop.console.address import base_url, link
from devloop.console.auth import new_token
from devloop.console.listen import Listener
from devloop.core.config import Settings
from devloop.core.errors import Problem
from devloop.core.money import raised_cap, resume_cap, spent_words
from devloop.fleet.control import clear_pause, set_default_cap
from devloop.fleet.dispatch import CANCELLED, resume_blocked
from devloop.fleet.messages import Dispatch
from devloop.fleet.status import ProjectStatus
from devloop.fleet.webhook import Notifier, webhook_problem
from devloop.server.embedded import RedisEndpoint
from devloop.server.supervisor import ChildSpec
from devloop.store import RedisStore

# `devloop run` ends paused (its project's budget spent) or cancelled (`devloop cancel`,
# the console's button): run `devloop resume` to carry on from the checkpoints.
EXIT_PAUSED, EXIT_CANCELLED = 4, 5


def apply_controls(
    store: RedisStore, pid: str, max_usd: float | None, resume: bool, settings: Settings
) -> list[Dispatch]:
    """A run starts: lift the project's pause (a spent budget pauses it again at the first
    step unless the cap was raised) and set the cap (a person's, else DevLoop's default); a
    resume also carries on the units a person cancelled one by one. The chains to send for
    those."""
    cap = max_usd if max_usd is not None else settings.given_project_cap()
    clear_pause(store, pid, cap, units=resume)
    if cap is None:
        set_default_cap(store, pid, settings.project_max_usd)
    return resume_blocked(store, pid, kinds=(CANCELLED,)) if resume else []


def start_console(
    children: RunChildren, endpoint: RedisEndpoint, state_dir: Path, project_dir: Path,
    listener: Listener, settings: Settings, console: Console,
) -> str:
    """`devloop console` as a supervised child of the run, serving the sockets the run bound
    (a restarted child serves the same ones); prints its link once (the token reaches it by
    environment, never on a command line); returns its base URL."""
    configured = settings.console_token.get_secret_value() if settings.console_token else None
    token = configured or new_token()
    host, port = listener.host, listener.port
    env = {**os.environ, "DEVLOOP_REDIS_URL": endpoint.url, "DEVLOOP_CONSOLE_TOKEN": token}
    command = [sys.executable, "-m", "workers.main", "console",
               str(project_dir), "--host", host, "--port", str(port)]
    command += [arg for fd in listener.fds() for arg in ("--fd", str(fd))]
    children.supervisor.add(ChildSpec("console", command, env, state_dir / "console.log",
                                      pass_fds=listener.fds()))
    if listener.moved:
        console.print(listener.note(), markup=False, highlight=False, soft_wrap=True)
    shown = link(host, port, token) if configured is None else (
        f"{base_url(host, port)} (token from DEVLOOP_CONSOLE_TOKEN)")
    console.print(f"Console: {shown}", markup=False, highlight=False, soft_wrap=True)
    return base_url(host, port)


def start_notifier(store: RedisStore, pid: str, settings: Settings) -> Notifier | None:
    """The webhook notifier of DEVLOOP_WEBHOOK_URL, following the project (None: unset)."""
    if settings.webhook_url is None:
        return None
    return Notifier(store, [pid], *webhook_settings(settings)).start()


def webhook_settings(settings: Settings) -> tuple[str, str]:
    """DEVLOOP_WEBHOOK_URL and DEVLOOP_WEBHOOK_SECRET ("" for one unset)."""
    url, secret = settings.webhook_url, settings.webhook_secret
    return (url.get_secret_value() if url else "", secret.get_secret_value() if secret else "")


def webhook_settings_problem(settings: Settings) -> Problem | None:
    """Why the webhook settings cannot start (exit 2 before anything runs), or None."""
    if settings.webhook_url is None:
        return None
    return webhook_problem(*webhook_settings(settings))


def waits_in_console(state: ProjectStatus, console: bool) -> bool:
    """With the console open, a blocked unit does not end the run: a person can unblock it
    there (Ctrl-C still ends the run)."""
    return console and state.count("blocked") > 0 and state.paused is None


def default_cap_words(final: ProjectStatus, project_dir: Path) -> str:
    """Why DevLoop's default cap paused the run, and the commands that carry it on (with a
    cap one default above what was spent)."""
    cap = final.default_max_usd or 0.0
    more = resume_cap(final.spent_usd, None, final.real_spent_usd, cap)
    folder = shlex.quote(str(project_dir))
    return (f"paused: budget: DevLoop's default cap on calls to a real model was reached "
            f"({spent_words(final.real_spent_usd, cap)}); no cap was given (--max-usd, "
            "DEVLOOP_PROJECT_MAX_USD). Every session's checkpoint is kept. Carry on with a "
            f"higher cap: `devloop resume {folder} --max-usd {more}`, or give every run one: "
            f"`export DEVLOOP_PROJECT_MAX_USD={more}`, then `devloop resume {folder}`")


def paused_exit(final: ProjectStatus, project_dir: Path, console: Console) -> int | None:
    """The exit code of a run that ended paused, after saying how to carry on; None if not.

    A pause outranks a blocked unit (docs/running.md, exit codes): a person's cancel reads as
    cancelled, and a spent budget as paused, even when every unit left is blocked, since
    nothing starts again before `devloop resume`. Only a project whose every unit passed
    ends 0 whatever pause came with its last step."""
    if final.paused is None or final.all_passed:
        return None
    spent = spent_words(final.spent_usd, final.max_usd)
    if final.paused == "budget" and final.max_usd is None and final.default_max_usd:
        # One line however narrow the terminal: the commands in it are copied whole.
        console.print(default_cap_words(final, project_dir), markup=False, highlight=False,
                      soft_wrap=True)
        return EXIT_PAUSED
    folder = shlex.quote(str(project_dir))
    if final.paused == "budget":
        cap = raised_cap(final.spent_usd, final.max_usd)
        console.print(f"paused: budget ({spent}); every session's checkpoint is kept. "
                      f"Carry on with a higher cap: `devloop resume {folder} --max-usd {cap}`",
                      markup=False, highlight=False, soft_wrap=True)
        return EXIT_PAUSED
    console.print(f"cancelled ({spent}); every session's checkpoint is kept. Carry on "
                  f"with `devloop resume {folder}`", markup=False, highlight=False,
                  soft_wrap=True)
    return EXIT_CANCELLED
