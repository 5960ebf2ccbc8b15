"""What a session's sandbox offers, for its prompt: the runtime and the packages with their
versions, read from the toolchain's own files (never hard-coded), so a model need not probe.

The words around these facts (module system, how run_tests runs, imports) are in
prompts/_environment.md, per stack, role and kind.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

from devloop.project.resources import data_dir

TOOLCHAINS = data_dir("toolchains")
_PYVENV_VERSION = re.compile(r"^version(?:_info)?\s*=\s*(\d+\.\d+\.\d+)", re.M)


@cache
def packages(stack: str) -> tuple[str, ...]:
    """`name version` of each package the stack's toolchain installs (its pinned file)."""
    if stack == "node":
        try:
            pkg = json.loads((TOOLCHAINS / "node" / "package.json").read_text())
        except (OSError, ValueError):
            return ()
        return tuple(f"{n} {v}" for n, v in sorted(pkg.get("dependencies", {}).items()))
    try:
        lines = (TOOLCHAINS / "python" / "requirements.txt").read_text().splitlines()
    except OSError:
        return ()
    pins = [line.split("#", 1)[0].strip().partition("==") for line in lines]
    return tuple(f"{name} {version}".strip() for name, _, version in pins if name)


def runtime(stack: str, toolchain: Path | None) -> str:
    """`Python 3.11.2` from the test venv's pyvenv.cfg, or `Node v20.19.2`; the bare name
    when the version cannot be read."""
    if stack == "node":
        version = _node_version()
        return f"Node {version}" if version else "Node"
    try:
        cfg = (toolchain / "pyvenv.cfg").read_text() if toolchain else ""
    except OSError:
        cfg = ""
    found = _PYVENV_VERSION.search(cfg)
    return f"Python {found[1]}" if found else "Python 3"


@cache
def _node_version() -> str | None:
    """The node on the sandbox's PATH (the host's /usr, bound read-only), asked once."""
    node = shutil.which("node", path="/usr/local/bin:/usr/bin:/bin")
    if node is None:
        return None
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None
