"""Install the stacks' toolchains once per machine into a world-readable cache dir.

Sandboxes run as an unprivileged uid that cannot read /root, so toolchains live under
`Settings.cache_dir` (never under /root) and are bound read-only into each view.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from devloop.errors import DevLoopError
from devloop.resources import data_dir

TOOLCHAINS = data_dir("toolchains")
# Debian's interpreter is world-readable; pyenv's lives under /root (mode 0700).
BASE_PYTHON = Path("/usr/bin/python3")
COMPLETE = ".devloop-complete"


class ToolchainError(DevLoopError):
    """A toolchain could not be installed; the message carries the tool's own output."""


def _digest(*files: Path) -> str:
    """A short hash of the pinned files, so a changed pin installs into a new dir."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.read_bytes())
    return h.hexdigest()[:12]


def _open_readable(path: Path) -> None:
    """Make a tree readable (and dirs traversable) by every uid."""
    subprocess.run(["chmod", "-R", "a+rX", str(path)], check=True)


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    """Run an install step; raise ToolchainError with its output when it fails."""
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        head = f"{' '.join(cmd)} failed (exit {proc.returncode}):"
        raise ToolchainError("\n".join([head, *tail]))


def _install_once(dest: Path, build: Callable[[Path], None]) -> Path:
    """Build dest in place under an exclusive lock, unless a previous build completed.

    Built in place (not renamed into place) because a venv's scripts embed their path;
    the completion marker is written last, so a half-built dir is rebuilt next time.
    """
    for parent in (dest.parent.parent, dest.parent):
        parent.mkdir(parents=True, exist_ok=True)
        os.chmod(parent, 0o755)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (dest / COMPLETE).exists():
            return dest
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir()
        build(dest)
        _open_readable(dest)
        (dest / COMPLETE).write_text("ok\n")
    return dest


def node_toolchain(cache_dir: Path) -> Path:
    """The installed node toolchain dir (holding node_modules), installing it if needed."""
    pkg, lock = TOOLCHAINS / "node" / "package.json", TOOLCHAINS / "node" / "package-lock.json"
    dest = cache_dir / "toolchains" / f"node-{_digest(pkg, lock)}"

    def build(staging: Path) -> None:
        shutil.copy(pkg, staging / "package.json")
        shutil.copy(lock, staging / "package-lock.json")
        npm_cache = cache_dir / "npm-cache"
        _run(
            ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline", "--cache", str(npm_cache)],
            cwd=staging,
        )
        # Vite writes these at start-up; sandboxes bind a tmpfs over each, so they must exist.
        (staging / "node_modules" / ".vite-temp").mkdir(exist_ok=True)
        (staging / "node_modules" / ".vite").mkdir(exist_ok=True)

    return _install_once(dest, build)


def python_toolchain(cache_dir: Path) -> Path:
    """The python stack's test venv dir (bin/python, bin/pytest), installing it if needed."""
    reqs = TOOLCHAINS / "python" / "requirements.txt"
    dest = cache_dir / "toolchains" / f"python-{_digest(reqs)}"

    def build(staging: Path) -> None:
        if not BASE_PYTHON.exists():
            raise ToolchainError(
                f"{BASE_PYTHON} not found: install Debian's python3 and python3-venv"
            )
        _run([str(BASE_PYTHON), "-m", "venv", str(staging)])
        _run([str(staging / "bin" / "pip"), "install", "-q", "-r", str(reqs)])

    return _install_once(dest, build)


def node_modules(cache_dir: Path) -> Path:
    """The node_modules dir to bind read-only at the view's `node_modules`."""
    return node_toolchain(cache_dir) / "node_modules"
