"""What the store hands back: unit state, unit files, commit and import outcomes."""

from __future__ import annotations

from dataclasses import dataclass, field

from devloop.core.errors import DevLoopError
from devloop.core.models import UnitState, UnitStatus  # the loop's pure model, kept here as JSON

__all__ = ["CommitResult", "ImportReport", "ProjectNotImported", "UnitFiles", "UnitState",
           "UnitStatus"]


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
