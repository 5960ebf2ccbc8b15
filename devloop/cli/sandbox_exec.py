"""`devloop sandbox exec`: run one command in a role's view, as an agent's Bash tool would."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from devloop.core.config import Settings
from devloop.core.errors import DevLoopError, ProjectInvalid
from devloop.core.suggest import unknown
from devloop.project.load import load_project
from devloop.project.stacks import stack_sandbox
from devloop.roles.workspace import CommitOutcome, Workspace
from devloop.sandbox import Observation
from devloop.server.embedded import redis_endpoint
from devloop.server.redis_server import connect
from devloop.store import RedisStore

EXIT_REJECTED = 3


@dataclass
class ExecReport:
    """What the command printed, and what was committed or rejected afterwards."""

    observation: Observation
    outcome: CommitOutcome
    redis_url: str
    notes: list[str] = field(default_factory=list)
    # Where the committed files went: the project folder, or why not (pull them by hand).
    written_back: bool = False

    @property
    def exit_code(self) -> int:
        """CMD's exit code, or 3 when any write was rejected."""
        return EXIT_REJECTED if self.outcome.violations else self.observation.exit_code


def sandbox_exec(
    project_dir: Path,
    unit: str,
    role: str,
    command: str,
    settings: Settings,
    timeout_s: float | None = None,
) -> ExecReport:
    """Import the project, materialize the role's view, run command, commit what it may
    write, and write what it committed back into the project folder.

    Each exec commits as an attempt of its own (a millisecond stamp), so running it twice
    commits twice instead of being taken for a redelivery. The write-back makes the folder
    hold the commit, so a later edit of the folder (which the next import takes as the
    unit's new state) builds on it instead of replacing it.
    """
    project = load_project(project_dir)
    if project.units.unit(unit) is None:
        known = [u.id for u in project.units.units]
        raise ProjectInvalid([unknown("units.json", "units", "unit", unit, known)])
    notes: list[str] = []
    written_back = False
    with redis_endpoint(project_dir, settings) as endpoint:
        store = RedisStore(connect(endpoint.url), file_cap_bytes=settings.file_cap_bytes)
        try:
            store.import_project(project)
            stamp = int(time.time() * 1000)
            run_id = f"exec-{stamp}" if role == "tester" else None
            ws = Workspace(store, project.pid, unit, role, stamp, settings=settings, run_id=run_id)
            try:
                ws.materialize()
                sandbox, mounts = stack_sandbox(project.stack_of(unit), settings)
                assert ws.root is not None
                obs = sandbox.run(
                    command,
                    view=ws.root,
                    cwd=ws.unit_rel,
                    writable=ws.writable(),
                    timeout_s=timeout_s or settings.command_timeout_s,
                    ro_binds=mounts.ro_binds,
                    tmpfs=mounts.tmpfs,
                )
                outcome = ws.commit()
            finally:
                ws.cleanup()
            if outcome.committed:
                try:
                    store.export(project.pid, project_dir, as_source=True)
                    written_back = True
                except (DevLoopError, OSError) as exc:
                    notes.append(
                        f"not written to {project_dir}: {exc}; the commit is kept in Redis: "
                        f"fix that, then `devloop pull {project_dir} {project_dir}`"
                    )
        finally:
            store.close()
    # The address is shown, never the password.
    return ExecReport(obs, outcome, endpoint.address, notes, written_back)
