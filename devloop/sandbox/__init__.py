"""Run one shell command over a materialized view of a project.

    Sandbox (protocol)     run(command, view=, cwd=, writable=, ...) -> Observation
    +-- BwrapSandbox       bubblewrap: namespaces, read-only view, rlimits, dropped uid
    +-- BareSandbox        no isolation (DEVLOOP_SANDBOX=none), warns on every run

Inside a bubblewrap sandbox the view is read-only at /project, `cwd` and `writable` are
relative to it, and only the writable paths are bound read-write. Missing writable
paths are created before binding (missing files as empty placeholders, which the
workspace layer treats as absent). jsonGuard runs first: a refused command returns an
Observation with `refused` set and exit code 2, and no process starts.
"""

from __future__ import annotations

from collections.abc import Mapping

from devloop.core.config import Settings
from devloop.sandbox.bare import BareSandbox
from devloop.sandbox.base import (
    REFUSED_EXIT,
    SANDBOX_ROOT,
    Limits,
    Observation,
    Sandbox,
    new_view_dir,
    sandbox_env,
)
from devloop.sandbox.bwrap import BwrapSandbox

__all__ = [
    "REFUSED_EXIT",
    "SANDBOX_ROOT",
    "BareSandbox",
    "BwrapSandbox",
    "Limits",
    "Observation",
    "Sandbox",
    "make_sandbox",
    "new_view_dir",
    "sandbox_env",
]


def make_sandbox(
    settings: Settings, limits: Limits | None = None, env: Mapping[str, str] | None = None
) -> Sandbox:
    """The sandbox `settings.sandbox` names; bubblewrap unless it is "none"."""
    if settings.sandbox == "none":
        return BareSandbox(settings, limits, env)
    return BwrapSandbox(settings, limits, env)
