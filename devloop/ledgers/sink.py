"""Append-only sinks: the storage seam under the ledgers (bugs, timeline, coder.log).

A sink keeps text records in the order they were appended and hands back their lines.
`FileSink` is the on-disk form (the seed's `bugs.ndjson`, `timeline.ndjson` and
`coder.log`); a Redis-stream sink implements the same two methods (one stream entry per
record, `lines()` splits the entries).
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import stat
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from devloop.safe.safedir import Dir, Refused, describe

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
    The file itself is never a followed link, a fifo or a device (Refused).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"FileSink({str(self.path)!r})"

    def _open(self, flags: int) -> int:
        if flags & os.O_CREAT:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return os.open(self.path, flags | _SAFE, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Refused(str(self.path), "is a symlink", exc.errno) from None
            raise

    def append(self, line: str) -> None:
        """Append one record, adding the final newline when it is missing."""
        _append(self._open(os.O_RDWR | os.O_APPEND | os.O_CREAT), str(self.path), line)

    def lines(self) -> list[str]:
        """Complete lines of the file; a trailing line without its newline is skipped."""
        try:
            fd = self._open(os.O_RDONLY)
        except FileNotFoundError:
            return []
        return _lines(fd, str(self.path))


class DirSink(FileSink):
    """A FileSink reached beneath a directory handle (a view's coder.log): no link on
    the way is followed, so a session cannot point the host's append elsewhere."""

    def __init__(self, root: Dir, rel: str) -> None:
        super().__init__(Path(root.name) / rel)
        self.root, self.rel = root, rel

    def __repr__(self) -> str:
        return f"DirSink({self.root!r}, {self.rel!r})"

    def _open(self, flags: int) -> int:
        return self.root.open_fd(self.rel, flags | os.O_NONBLOCK, 0o644)


# Never through a link at the file itself, never blocking on a fifo.
_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _regular(fd: int, name: str) -> int:
    """fd, when it is a regular file; else it is closed and Refused."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise Refused(name, f"is {describe(mode)}, not a regular file")
    return fd


def _append(fd: int, name: str, line: str) -> None:
    """Append one record to fd under an exclusive lock, then close it."""
    payload = (line if line.endswith("\n") else line + "\n").encode("utf-8")
    _regular(fd, name)
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


def _lines(fd: int, name: str) -> list[str]:
    """The complete lines readable from fd (closed afterwards)."""
    with os.fdopen(_regular(fd, name), "rb") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_SH)
        data = f.read()
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
