"""Errors a user can cause, and the exceptions DevLoop raises.

    DevLoopError                 base of every DevLoop exception
    +-- ProjectInvalid           a project folder has problems (carries every Problem)
    +-- FileTooLarge             a unit's files exceed the size cap
    +-- SandboxUnavailable       bubblewrap cannot create its namespaces on this host
    +-- ToolchainError           a stack toolchain could not be installed (toolchain.py)
    +-- BugTransitionError       a bug state change the state machine forbids (ledgers/bugs.py)
    +-- BugNotOwned              a session moving another unit's bug (ledgers/bugs.py)
    +-- InvalidId                an id that breaks the id rule, or would leave its root (ids.py)
    +-- DecisionInvalid          a coder.log decision missing required fields (ledgers/coderlog.py)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with user input: the file, the field, what is wrong and the fix."""

    file: str
    field: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.file}: {self.field}: {self.message}"
        return f"{text}; fix: {self.fix}" if self.fix else text


class DevLoopError(Exception):
    """Base of every DevLoop exception."""


class ProjectInvalid(DevLoopError):
    """A project folder failed validation; `problems` lists each one."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class FileTooLarge(DevLoopError):
    """A unit's files exceed the size cap."""


class CheckInterrupted(DevLoopError):
    """A self-check's command was killed from outside (a shutdown): no verdict on the work."""


class SandboxUnavailable(DevLoopError):
    """Bubblewrap cannot run here; the message says why and how to fix it."""
