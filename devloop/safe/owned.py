"""Files only their owning tool writes (coder.log, a run's result.json): the bytes each
tool last wrote, and how a session's change to one is judged. Pure.

A tool records what it writes; the workspace compares the view with the record, reports
any other change as a violation and commits the record instead.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

# How a record's path was found in the view: a regular file of the record's size (with
# its bytes), nothing there, or anything else (a link, fifo, directory, a file of another
# size, a path that cannot be read).
Found = Literal["file", "absent", "other"]


@dataclass
class OwnedFile:
    """One tool-owned file: its owner, what to do instead, and what the owner last wrote."""

    owner: str
    advice: str
    data: bytes | None = None  # None: the owner has not written it (it must not exist)

    def judge(self, found: Found, data: bytes | None = None) -> str | None:
        """Why what the view holds is not the owner's record, or None when it is."""
        if self.data is None:
            # An empty file is the placeholder the sandbox makes to bind a path: no write.
            if found == "absent" or (found == "file" and not data):
                return None
            return (
                f"written only by {self.owner}; the session's file was discarded "
                f"({self.advice})"
            )
        if found == "file" and data == self.data:
            return None
        done = "deleted it" if found == "absent" else "changed it"
        return (
            f"written by {self.owner}; the session {done} and the change was discarded "
            f"({self.advice})"
        )


class OwnedFiles:
    """The tool-owned files of one view, by unit-relative path."""

    def __init__(self, owned: Mapping[str, tuple[str, str]] | None = None) -> None:
        self._records = {rel: OwnedFile(*how) for rel, how in (owned or {}).items()}

    def start(self, base: Mapping[str, bytes]) -> None:
        """Begin from the unit's files as materialized: what the owners wrote before."""
        for rel, record in self._records.items():
            record.data = base.get(rel)

    def __iter__(self) -> Iterator[tuple[str, OwnedFile]]:
        return iter(sorted(self._records.items()))

    def get(self, rel: str) -> OwnedFile | None:
        """The record of a unit-relative path, or None when no tool owns it."""
        return self._records.get(rel)

    def holder(self, rel: str) -> str | None:
        """The owned path that rel is, or lies beneath (a record made a directory)."""
        for owned in self._records:
            if rel == owned or rel.startswith(owned + "/"):
                return owned
        return None

    def wrote(self, rel: str, data: bytes) -> None:
        """The owning tool wrote data to rel (the view holds it now)."""
        record = self._records.get(rel)
        if record is None:
            raise KeyError(f"{rel} is not a tool-owned file of this view")
        record.data = data
