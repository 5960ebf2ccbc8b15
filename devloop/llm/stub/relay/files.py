"""A relay directory: numbered request and answer files and the index of requests.

    DIR/index.ndjson          one line per request: {"seq", "session_key", "turn"}
    DIR/0007.request.json     {"seq", "session_key", "turn", "body": the Messages-API request}
    DIR/0007.answer.json      the Messages-API response to serve (`devloop relay answer`)
    DIR/0007.rejected.json    an answer the server refused, beside 0007.problem.txt
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devloop.safe.private import write_private

INDEX = "index.ndjson"


@dataclass(frozen=True, slots=True)
class RelayEntry:
    """One request's line in the index."""

    seq: int
    session_key: str
    turn: int


def write_atomically(path: Path, text: str) -> None:
    """Write text so a reader sees the whole file or none of it, 0600, never through a link
    planted in its place (devloop.safe.private.write_private)."""
    write_private(path, text.encode("utf-8"))


class RelayDir:
    """The files of one relay directory (RelayDesk makes it, this user's alone)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def request_path(self, seq: int) -> Path:
        """Where request `seq` is written."""
        return self.root / f"{seq:04d}.request.json"

    def answer_path(self, seq: int) -> Path:
        """Where the answer to request `seq` is read from."""
        return self.root / f"{seq:04d}.answer.json"

    def rejected_path(self, seq: int) -> Path:
        """Where a refused answer to request `seq` is moved."""
        return self.root / f"{seq:04d}.rejected.json"

    def problem_path(self, seq: int) -> Path:
        """Why the last answer to request `seq` was refused."""
        return self.root / f"{seq:04d}.problem.txt"

    def entries(self) -> list[RelayEntry]:
        """Every request so far, in arrival order."""
        try:
            text = (self.root / INDEX).read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        lines = text.split("\n")[:-1]  # a last line still being appended is not one yet
        out = []
        for line in lines:
            if line.strip():
                row = json.loads(line)
                out.append(RelayEntry(int(row["seq"]), str(row["session_key"]), int(row["turn"])))
        return out

    def entry(self, seq: int) -> RelayEntry | None:
        """Request `seq`'s line in the index (None: no such request)."""
        return next((e for e in self.entries() if e.seq == seq), None)

    def waiting(self) -> list[RelayEntry]:
        """The requests that have no answer yet, oldest first."""
        return [e for e in self.entries() if not self.answer_path(e.seq).exists()]

    def add_request(self, entry: RelayEntry, body: dict[str, Any]) -> None:
        """Write the request's file, then its index line (a reader finds only whole ones)."""
        record = {"seq": entry.seq, "session_key": entry.session_key, "turn": entry.turn,
                  "body": body}
        write_atomically(self.request_path(entry.seq), json.dumps(record, indent=1))
        line = {"seq": entry.seq, "session_key": entry.session_key, "turn": entry.turn}
        with (self.root / INDEX).open("a", encoding="utf-8") as index:
            index.write(json.dumps(line) + "\n")

    def request(self, seq: int) -> dict[str, Any]:
        """Request `seq`'s body."""
        record: dict[str, Any] = json.loads(self.request_path(seq).read_text(encoding="utf-8"))
        body: dict[str, Any] = record["body"]
        return body

    def answer(self, seq: int) -> dict[str, Any] | None:
        """The answer written for request `seq` (None: not yet)."""
        try:
            text = self.answer_path(seq).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        message: dict[str, Any] = json.loads(text)
        return message
