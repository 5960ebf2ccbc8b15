"""The commands DevLoop prints for a person to run next, harvested from real output and run
exactly as printed (from the directory the printing command ran in)."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from tests.proctree import run_bounded
from tests.workers.runproc import DEVLOOP, clean_env

# `devloop ...` in backticks or <code>, or a line that is a command (after a label such as
# "try it:" or "report:"), with an optional VAR=value before it. "devloop run: gave up" and
# "devloop worker: ..." are messages, not commands: a command's word is never followed by ":".
_QUOTED = re.compile(r"(?:`|<code>)((?:[A-Z_]+=\S+ )?devloop [a-z-]+(?: [^`<]*)?)(?:`|</code>)")
_LINE = re.compile(r"^\s*(?:[a-z ]+:\s+)?((?:[A-Z_]+=\S+ )?devloop [a-z-]+(?: .*)?)$")


def harvest(text: str) -> list[str]:
    """Every command in text, in order, each once."""
    found: list[str] = []
    for line in text.splitlines():
        quoted = _QUOTED.findall(line)
        whole = _LINE.match(line) if not quoted else None
        for command in quoted or ([whole.group(1)] if whole else []):
            if not re.match(r"(?:[A-Z_]+=\S+ )?devloop [a-z-]+:", command) and command not in found:
                found.append(command.rstrip())
    return found


def argv_env(command: str, devloop: str = DEVLOOP, **env: str) -> tuple[list[str], dict[str, str]]:
    """The printed command as a shell would run it: leading VAR=value into the environment,
    `devloop` the installed one (this venv's, unless another install is given)."""
    words = shlex.split(command)
    extra = {}
    while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        extra[name] = value
    assert words[0] == "devloop", command
    return [devloop, *words[1:]], {**clean_env(**env), **extra}


def run_printed(command: str, cwd: Path, timeout: float = 300,
                **env: str) -> subprocess.CompletedProcess[str]:
    """Run one harvested command to its end, as printed."""
    argv, environment = argv_env(command, **env)
    return run_bounded(argv, cwd=cwd, env=environment, timeout=timeout)


def start_printed(command: str, cwd: Path, out: Path, **env: str) -> subprocess.Popen[bytes]:
    """Start one harvested command (a run the test watches or stops), output into `out`."""
    argv, environment = argv_env(command, **env)
    with open(out, "wb") as sink:
        return subprocess.Popen(argv, cwd=cwd, env=environment, stdout=sink,
                                stderr=subprocess.STDOUT)
