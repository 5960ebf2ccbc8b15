"""Artifacts an attacker plants in a unit's code/: a `.pyc` compiled from other source, and a
`.git` whose `core.fsmonitor` runs a command when git runs there."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

# A .py whose add() is right, and what the planted .pyc was compiled from instead.
MONEY = "def add(a, b):\n    return a + b\n"
EVIL_MONEY = "def add(a, b):\n    return 999\n"
MONEY_TESTS = "from money import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"


def pyc_name(python: Path | str = sys.executable) -> str:
    """`money.cpython-311.pyc` for the interpreter that will import it."""
    tag = subprocess.run(
        [str(python), "-c", "import sys; print(sys.implementation.cache_tag)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    return f"money.{tag}.pyc"


def plant_pyc(code: Path, python: Path | str = sys.executable) -> Path:
    """code/__pycache__/money.<tag>.pyc compiled by `python` from EVIL_MONEY with an
    unchecked hash: python runs it without ever comparing it with money.py."""
    cache = code / "__pycache__"
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / pyc_name(python)
    source = code.parent / ".evil-money.py"
    source.write_text(EVIL_MONEY)
    subprocess.run(
        [str(python), "-c",
         "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], "
         "doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)",
         str(source), str(target)],
        check=True,
    )
    source.unlink()
    return target


def git_files(marker: Path) -> dict[str, str]:
    """The files of a minimal `.git` whose status runs `touch marker` (core.fsmonitor)."""
    return {
        ".git/HEAD": "ref: refs/heads/main\n",
        ".git/config": f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch {marker}\n",
        ".git/objects/info/README": "objects\n",  # git wants objects/ and refs/ to exist
        ".git/refs/heads/README": "refs\n",
    }


def plant_git(code: Path, marker: Path) -> None:
    """Write git_files(marker) under code/."""
    for rel, text in git_files(marker).items():
        (code / rel).parent.mkdir(parents=True, exist_ok=True)
        (code / rel).write_text(text)


def plant_git_command(marker: Path) -> str:
    """A shell command, run in a unit dir, that plants git_files(marker) under code/."""
    steps = []
    for rel, text in git_files(marker).items():
        path = f"code/{rel}"
        steps.append(f"mkdir -p {shlex.quote(str(Path(path).parent))} && "
                     f"printf %s {shlex.quote(text)} > {shlex.quote(path)}")
    return " && ".join(steps)


def git_status_runs_fsmonitor(code: Path, marker: Path) -> bool:
    """Run `git status` in code/ as a person would; whether the planted command ran."""
    subprocess.run(["git", "status"], cwd=code, capture_output=True, timeout=60,
                   env={"PATH": "/usr/bin:/bin", "HOME": str(code),
                        "GIT_CEILING_DIRECTORIES": str(code.parent)})
    return marker.exists()
