"""Install the stacks' toolchains once per machine into a world-readable cache dir.

Sandboxes run as an unprivileged uid that cannot read /root, so toolchains live under
the cache dir (devloop.safe.cachedir: never under /root, and used only when no one but its
owner controls it) and are bound read-only into each view. The lock, the completion
marker and a half-built dir are reached without following a link.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

from devloop.core.errors import DevLoopError
from devloop.project.resources import data_dir
from devloop.safe.cachedir import ensure_public_dir, locked, trusted_cache
from devloop.safe.safedir import Dir
from devloop.safe.safetree import remove_tree
from devloop.sandbox.base import PYCACHE_PREFIX

TOOLCHAINS = data_dir("toolchains")
# Debian's interpreter is world-readable; pyenv's lives under /root (mode 0700).
BASE_PYTHON = Path("/usr/bin/python3")
COMPLETE = ".devloop-complete"
# How the python venv is built, beyond its pins: a new recipe installs into a new dir.
PYTHON_RECIPE = "2"  # 2: with its bytecode tree
# The bytecode of the interpreter's stdlib and the venv's packages, as a pycache_prefix
# tree: sandboxes bind it read-only at PYCACHE_PREFIX, where Python looks for every cache
# (so none beside a source in the view is ever read). Without it each test run compiled
# pytest, coverage and the stdlib again: 0.8 CPU-s for a one-test run, against 0.2.
BYTECODE = "bytecode"
# Never imported by a test run, and some hold files that do not compile on purpose.
BYTECODE_SKIPPED = r"/(test|tests|idlelib|tkinter|turtledemo|lib2to3|ensurepip)/"


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


def _install_once(cache_dir: Path, name: str, build: Callable[[Path], None]) -> Path:
    """Build <cache>/toolchains/name in place under an exclusive lock, unless a previous
    build completed.

    Built in place (not renamed into place) because a venv's scripts embed their path;
    the completion marker is written last, so a half-built dir is rebuilt next time.
    """
    parent = ensure_public_dir(trusted_cache(cache_dir) / "toolchains")
    dest = parent / name
    with locked(parent, f".{name}.lock"), Dir.open(parent) as root:
        if _complete(root, name):
            return dest
        remove_tree(root, name)  # a half-built dir, or whatever else is in its place
        root.mkdirs(name, 0o755)
        build(dest)
        _open_readable(dest)
        root.write_atomic(f"{name}/{COMPLETE}", "ok\n", 0o644)
    return dest


def _complete(root: Dir, name: str) -> bool:
    """Whether root/name is a build of this user's that finished (no link on the way)."""
    st = root.lstat(name)
    if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return False
    return root.is_file(f"{name}/{COMPLETE}")


def node_toolchain(cache_dir: Path) -> Path:
    """The installed node toolchain dir (holding node_modules), installing it if needed."""
    pkg, lock = TOOLCHAINS / "node" / "package.json", TOOLCHAINS / "node" / "package-lock.json"

    def build(staging: Path) -> None:
        shutil.copy(pkg, staging / "package.json")
        shutil.copy(lock, staging / "package-lock.json")
        npm_cache = ensure_public_dir(trusted_cache(cache_dir) / "npm-cache", 0o700)
        _run(
            ["npm", "ci", "--no-audit", "--no-fund", "--prefer-offline", "--cache", str(npm_cache)],
            cwd=staging,
        )
        # Vite writes these at start-up; sandboxes bind a tmpfs over each, so they must exist.
        (staging / "node_modules" / ".vite-temp").mkdir(exist_ok=True)
        (staging / "node_modules" / ".vite").mkdir(exist_ok=True)

    return _install_once(cache_dir, f"node-{_digest(pkg, lock)}", build)


def python_toolchain(cache_dir: Path) -> Path:
    """The python stack's test venv dir (bin/python, bin/pytest), installing it if needed."""
    reqs = TOOLCHAINS / "python" / "requirements.txt"

    def build(staging: Path) -> None:
        if not BASE_PYTHON.exists():
            raise ToolchainError(
                f"{BASE_PYTHON} not found: install Debian's python3 and python3-venv"
            )
        _run([str(BASE_PYTHON), "-m", "venv", str(staging)])
        _run([str(staging / "bin" / "pip"), "install", "-q", "-r", str(reqs)])
        _compile_bytecode(staging)

    return _install_once(cache_dir, python_toolchain_name(), build)


def python_toolchain_name() -> str:
    """The python venv's dir name under toolchains/: its pins and its recipe."""
    return f"python-{_digest(TOOLCHAINS / 'python' / 'requirements.txt')}-{PYTHON_RECIPE}"


def _compile_bytecode(venv: Path) -> None:
    """Compile the stdlib and the venv's packages into venv/bytecode (a pycache_prefix tree).

    Best effort: a file that does not compile is read from its source, as without the tree.
    """
    python = str(venv / "bin" / "python")
    found = subprocess.run(
        [python, "-c", "import sysconfig; p = sysconfig.get_paths(); "
                       "print(p['stdlib']); print(p['purelib'])"],
        capture_output=True, text=True, check=False,
    )
    where = found.stdout.split()
    if found.returncode != 0 or len(where) != 2:
        return
    subprocess.run(
        [python, "-X", f"pycache_prefix={venv / BYTECODE}", "-m", "compileall", "-q",
         "-x", BYTECODE_SKIPPED, *where],
        capture_output=True, check=False,
    )


def bytecode_binds(venv: Path) -> list[tuple[Path, str]]:
    """Read-only binds of the venv's bytecode tree under PYCACHE_PREFIX (none if absent).

    Each top-level dir (`usr`, and where the cache lives) is bound on its own: the prefix
    itself stays on the sandbox's private /tmp, where a command may still write the caches
    of the view's files (`python -m py_compile code/app.py`), as before the tree.
    """
    tree = venv / BYTECODE
    if not tree.is_dir():
        return []
    return [(top, f"{PYCACHE_PREFIX}/{top.name}") for top in sorted(tree.iterdir())
            if top.is_dir() and not top.is_symlink()]


def node_modules(cache_dir: Path) -> Path:
    """The node_modules dir to bind read-only at the view's `node_modules`."""
    return node_toolchain(cache_dir) / "node_modules"
