"""Per-stack wiring of a view: which toolchain is mounted where, and the sandbox's PATH."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from devloop.core.config import Settings
from devloop.core.models import Stack
from devloop.project.toolchain import bytecode_binds, node_toolchain, python_toolchain
from devloop.safe.cachedir import cache_root
from devloop.sandbox import Sandbox, make_sandbox


@dataclass(frozen=True)
class StackMounts:
    """Read-only toolchain binds, private tmpfs paths and extra env for one stack."""

    ro_binds: tuple[tuple[Path, str], ...]
    tmpfs: tuple[str, ...]
    env: dict[str, str]


def stack_mounts(stack: Stack, settings: Settings) -> StackMounts:
    """Install (once) and describe the toolchain a stack's sessions run with."""
    if stack == "node":
        modules = node_toolchain(cache_root(settings)) / "node_modules"
        return StackMounts(
            ro_binds=((modules, "node_modules"),),
            # Vite writes here at start-up; a private tmpfs keeps the toolchain read-only.
            tmpfs=("node_modules/.vite-temp", "node_modules/.vite"),
            env={"PATH": "/project/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"},
        )
    venv = python_toolchain(cache_root(settings))
    return StackMounts(
        ro_binds=((venv, str(venv)), *bytecode_binds(venv)),
        tmpfs=(),
        env={"PATH": f"{venv}/bin:/usr/local/bin:/usr/bin:/bin"},  # caches: sandbox_env
    )


_built: dict[tuple[str, str], tuple[Sandbox, StackMounts]] = {}


def stack_sandbox(stack: Stack, settings: Settings) -> tuple[Sandbox, StackMounts]:
    """A sandbox whose PATH finds the stack's tools, and the mounts to pass each run.

    Built once per process and settings: a worker runs many steps, and building a
    sandbox probes bubblewrap and lays out its /etc (tens of milliseconds).
    """
    key = (stack, settings.model_dump_json())
    if key not in _built:
        mounts = stack_mounts(stack, settings)
        _built[key] = (make_sandbox(settings, env=mounts.env), mounts)
    return _built[key]
