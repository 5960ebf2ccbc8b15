"""How a project folder was last run, so the commands DevLoop prints carry on the same way.

`devloop run DIR --llm stub` followed by a printed `devloop run DIR` (or `resume`, or
`unblock --run`) must run the stub again, not ask for an API key: the run's choices are
kept in `DIR/.devloop/last-run.json` (this user's, 0600, in the folder's private state
dir) and an option not given on the command line takes the remembered value. Options
given always win, and the new run's choices are remembered in turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from devloop.safe.private import read_private, write_private
from devloop.server.embedded import STATE_DIR, private_state_dir

LAST_RUN = "last-run.json"
Llm = Literal["anthropic", "stub"]


class RunChoices(BaseModel):
    """What a run of a folder was started with (the options a person would retype)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    llm: Llm = "anthropic"
    script: str | None = None  # absolute; None: the folder's own stub.yaml
    workers: int = Field(default=2, ge=1, le=64)
    console: bool = False
    console_host: str = "127.0.0.1"
    console_port: int | None = Field(default=None, ge=1, le=65535)  # None: DevLoop's default
    flower: bool = False
    flower_port: int = Field(default=5555, ge=1, le=65535)


@dataclass(frozen=True)
class Given:
    """The options a command line gave (None: not given, so the last run's value holds)."""

    llm: Llm | None = None
    script: Path | None = None
    workers: int | None = None
    console: bool | None = None
    console_host: str | None = None
    console_port: int | None = None
    flower: bool | None = None
    flower_port: int | None = None


def carry_on(
    given: Given, last: RunChoices | None, folder: Path
) -> tuple[RunChoices, list[str]]:
    """The choices for this run of `folder`, and the flags taken from its last run (to say
    so). A flag is reported only when it differs from DevLoop's default: a remembered
    default changes nothing a person would notice."""
    base = last or RunChoices()
    chosen: dict[str, object] = {
        f.name: getattr(given, f.name) for f in fields(Given) if getattr(given, f.name) is not None
    }
    if given.script is not None:
        resolved = given.script.resolve()
        # The folder's own script stays relative to it: the folder may be moved.
        chosen["script"] = None if resolved == (folder / "stub.yaml").resolve() else str(resolved)
    elif given.llm == "anthropic":
        chosen["script"] = None  # a script belongs to the stub
    defaults = RunChoices()
    carried = [_flag(name, getattr(base, name)) for name in RunChoices.model_fields
               if name not in chosen and getattr(base, name) != getattr(defaults, name)]
    return base.model_copy(update=chosen), carried


def _flag(name: str, value: object) -> str:
    """The command-line form of one remembered choice."""
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else f"--no-{name.replace('_', '-')}"
    return f"{flag} {value}"


def recall(project_dir: Path) -> RunChoices | None:
    """The folder's last run's choices; None when it has none (or none this user wrote)."""
    if not (project_dir / STATE_DIR).is_dir():
        return None  # never run here: nothing to recall, and nothing is created
    raw = read_private(private_state_dir(project_dir) / LAST_RUN)
    if raw is None:
        return None
    try:
        return RunChoices.model_validate_json(raw)
    except ValidationError:
        return None  # an older or damaged record: the defaults, as for a new folder


def remember(project_dir: Path, choices: RunChoices) -> None:
    """Keep this run's choices for the commands printed after it."""
    data = json.dumps(choices.model_dump(), indent=2).encode() + b"\n"
    write_private(private_state_dir(project_dir) / LAST_RUN, data)


def script_path(choices: RunChoices) -> Path | None:
    """The stub script the choices name (None: the folder's stub.yaml)."""
    return Path(choices.script) if choices.script else None
