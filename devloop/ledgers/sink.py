"""Append-only sinks: the storage seam under the ledgers (bugs, timeline, coder.log).

A sink keeps text records in the order they were appended and hands back their lines.
`FileSink` is the on-disk form (the seed's `bugs.ndjson`, `timeline.ndjson` and
`coder.log`); a Redis-stream sink implements the same two methods (one stream entry per
record, `lines()` splits the entries).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time in UTC (the default clock of every ledger)."""
    return datetime.now(UTC)


def iso_z(moment: datetime) -> str:
    """ISO-8601 UTC with a Z at second precision, as in the seed: 2026-05-13T10:32:08Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@runtime_checkable
class AppendSink(Protocol):
    """An append-only store of text records."""

    def append(self, line: str) -> None:
        """Store one record atomically: newline-terminated text, possibly several lines."""

    def lines(self) -> list[str]:
        """Every complete line stored so far, in order, without the newlines."""


class FileSink:
    """A file that several processes append to at once without losing or mixing records.

    Each `append` is one `write(2)` on an `O_APPEND` descriptor under an exclusive
    `flock`. `O_APPEND` alone is not enough: a regular-file write may be split (short
    writes, records larger than the page cache's chunking), and readers could see a
    record half-written; the lock makes every writer that uses `FileSink` wait its turn.
    A record may span several lines (a coder.log block), and is still written whole.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"FileSink({str(self.path)!r})"

    def append(self, line: str) -> None:
        """Append one record, adding the final newline when it is missing."""
        payload = (line if line.endswith("\n") else line + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd is closed
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # A torn last line (a crashed writer, a tool or model that wrote the file
                # without a final newline) must not swallow this record: end it first.
                payload = b"\n" + payload
            _write_all(fd, payload)
        finally:
            os.close(fd)

    def lines(self) -> list[str]:
        """Complete lines of the file; a trailing line without its newline is skipped."""
        try:
            with open(self.path, "rb") as f:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH)
                data = f.read()
        except FileNotFoundError:
            return []
        head, newline, _partial = data.rpartition(b"\n")
        if not newline:
            return []
        # split("\n"), not splitlines(): U+2028 and friends are legal inside a JSON value.
        return head.decode("utf-8", errors="replace").split("\n")


def _write_all(fd: int, payload: bytes) -> None:
    """Write payload with one write(2) in the normal case, finishing any short write."""
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def dumps_line(obj: Any) -> str:
    """Compact one-line JSON that keeps non-ASCII text readable."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def read_json_lines(sink: AppendSink) -> Iterator[dict[str, Any]]:
    """The JSON objects of an ndjson sink; blank and malformed lines are skipped with a warning."""
    for number, line in enumerate(sink.lines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            log.warning("%r: line %d is not JSON (%s); skipped", sink, number, exc)
            continue
        if not isinstance(obj, dict):
            log.warning("%r: line %d is not a JSON object; skipped", sink, number)
            continue
        yield obj
