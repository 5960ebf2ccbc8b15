"""What the store hands back: unit state, unit files, commit and import outcomes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from devloop.errors import DevLoopError

UnitStatus = Literal[
    "pending",
    "ready",
    "coding",
    "testing",
    "passed",
    "failed",
    "crashed",
    "validation_failed",
    "waiting_model",
    "review",  # tests green, waiting for a person's approval (units.json "review": "required")
    "blocked",
    "blocked_upstream",
]


class UnitState(BaseModel):
    """Where one unit is in the red/green loop; stored as JSON, changed by compare-and-set."""

    model_config = ConfigDict(extra="forbid")

    status: UnitStatus = "pending"
    attempt: int = 0
    failure_signature: str | None = None
    signature_repeats: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    started_at: float | None = None
    updated_at: float | None = None
    last_hint: str | None = None
    last_error: str | None = None  # a step's exception or the model's error, one line
    blocked_reason: str | None = None
    # Its last decision was made in a run of the stub's scripted turns (`--llm stub`): a
    # pass then proves the script, not the code, and a run with a real model runs it again.
    scripted: bool = False
    extra: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class UnitFiles:
    """A unit's files at one version: path relative to units/{id} -> bytes."""

    version: int
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class CommitResult:
    """The outcome of one commit: applied, or why not ("already committed", "version conflict")."""

    applied: bool
    version: int
    reason: str | None = None


@dataclass(frozen=True)
class ImportReport:
    """What an import found: units and files seen, and whether anything in Redis changed."""

    pid: str
    units: int
    files: int
    changed: bool
    changed_units: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # artifacts left out, each with why


class ProjectNotImported(DevLoopError):
    """The project id has no record in Redis."""
