"""`devloop session run`: one role session outside the fleet, for debugging a unit."""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from pydantic import BaseModel

from devloop.agent.tools import ProgressEvent
from devloop.core.config import Settings
from devloop.core.errors import DevLoopError, Problem
from devloop.core.suggest import unknown
from devloop.llm.anthropic import AnthropicProvider
from devloop.project.load import Project, load_project
from devloop.roles import context
from devloop.roles.coder import run_coder
from devloop.roles.runtime import Role, RoleRequest
from devloop.roles.tester import run_tester
from devloop.server.embedded import redis_endpoint
from devloop.server.redis_server import connect
from devloop.store import RedisStore


def default_attempt(store: RedisStore, pid: str, unit: str, role: Role, mode: str) -> int:
    """The attempt a debugging session most likely means: the next one for a coder retry."""
    files = store.unit_files(pid, unit).files
    logged = max((d.attempt for d in context.decisions(files)), default=0)
    if role == "coder":
        return logged + 1 if mode == "retry" else max(1, logged)
    return max(1, logged)


class SessionRefused(DevLoopError):
    """The session cannot start as asked; `problems` says why and what to do."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def _refusals(project: Project, unit: str, llm: str, script: Path) -> list[Problem]:
    """What stops the session before anything starts: an unknown unit, no model to call."""
    if project.units.unit(unit) is None:
        return [unknown("units.json", "units", "unit", unit, [u.id for u in project.units.units])]
    if llm == "anthropic" and not os.environ.get("ANTHROPIC_API_KEY"):
        return [Problem("ANTHROPIC_API_KEY", "environment", "not set",
                        "export your Anthropic API key, or run with --llm stub (scripted turns "
                        "from DIR/stub.yaml or --script FILE)")]
    if llm == "stub" and not script.is_file():
        return [Problem(str(script), "file", "not found",
                        "pass --script FILE with the scripted turns (docs/stub-script.md)")]
    return []


def run_debug_session(
    project_dir: Path,
    unit: str,
    role: Role,
    mode: str,
    settings: Settings,
    *,
    llm: str = "anthropic",
    script: Path | None = None,
    attempt: int | None = None,
    emit: Callable[[ProgressEvent], None] = lambda e: None,
) -> BaseModel:
    """Import the project, run one session, export its results; return the role's output.

    SessionRefused (nothing started) for an unknown unit, a missing API key or stub script.
    """
    project = load_project(project_dir)
    script = script or project_dir / "stub.yaml"
    problems = _refusals(project, unit, llm, script)
    if problems:
        raise SessionRefused(problems)
    with ExitStack() as stack:
        endpoint = stack.enter_context(redis_endpoint(project_dir, settings))
        store = RedisStore(connect(endpoint.url), file_cap_bytes=settings.file_cap_bytes)
        stack.callback(store.close)
        store.import_project(project)
        if llm == "stub":
            from devloop.llm.stub import ScriptInvalid, StubServer

            try:
                stub = stack.enter_context(StubServer(script))
            except ScriptInvalid as exc:
                raise SessionRefused(exc.problems) from None
            provider = AnthropicProvider(api_key="stub", base_url=stub.base_url)
        else:
            provider = AnthropicProvider()
        n = attempt or default_attempt(store, project.pid, unit, role, mode)
        output: BaseModel
        if role == "coder":
            request = RoleRequest(project.pid, unit, "coder", mode, n)
            _, output = run_coder(store, settings, provider, request, emit)
        else:
            tries = sum(
                1
                for p in store.unit_files(project.pid, unit).files
                if p.startswith(f"runs/run-{n}-") and p.endswith("/result.json")
            )
            request = RoleRequest(
                project.pid, unit, "tester", mode, n, run_id=f"run-{n}-{tries + 1}"
            )
            _, output = run_tester(store, settings, provider, request, emit)
        store.export(project.pid, project_dir, as_source=True)
        return output
