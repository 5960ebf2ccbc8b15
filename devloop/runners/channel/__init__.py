"""The verdict channel: test results streamed to the worker over a pipe, as tests finish.

The worker creates a pipe and passes its write end into the sandbox (fd number in
VERDICT_FD); a pytest plugin (`verdict_channel.py`) or a vitest reporter
(`vitest_reporter.mjs`) writes one JSON line per event to it; `vitest_guard.mjs`, a setup
file in each vitest worker, checks that the code under test left the framework alone.
Those files ship in this package and are copied into a world-readable dir under the
cache, checked against the package's bytes before each run, which the runners bind
read-only: the sandbox can neither edit them nor rewrite a line once it is sent. A thread
reads the pipe while the run goes, keeping at most `CAP` bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devloop.safe.cachedir import ensure_public_dir, locked, trusted_cache
from devloop.safe.safedir import Dir
from devloop.safe.safetree import remove_tree
from devloop.sandbox.process import OutputTally

HERE = Path(__file__).resolve().parent
FILES = ("verdict_channel.py", "coverage_json.py", "vitest_reporter.mjs", "vitest_guard.mjs",
         "hollow.cjs")
PYTEST_PLUGIN = "verdict_channel"
COVERAGE_PLUGIN = "coverage_json"  # the run's coverage.json, from the run's own process
VITEST_REPORTER = "vitest_reporter.mjs"
VITEST_GUARD = "vitest_guard.mjs"
HOLLOW_SCRIPT = "hollow.cjs"  # the node hollow build (devloop/runners/hollow_py.py's twin)
CAP = 8 * 1024 * 1024
_DRAIN_S = 2.0


def plugin_dir(cache_dir: Path) -> Path:
    """The read-only copy of the plugin and the reporter, checked before each use.

    Its name is the package files' digest, which anyone can compute, so the name proves
    nothing: the copy must hold exactly those files, each a regular file of this user's
    with the package's bytes (read without following a link), or it is made again (an
    O_EXCL staging dir renamed into place) under a lock, whatever was there removed.
    """
    wanted = {name: (HERE / name).read_bytes() for name in FILES}
    digest = hashlib.sha256()
    for name, data in wanted.items():
        digest.update(name.encode() + b"\0" + data)
    parent = ensure_public_dir(trusted_cache(cache_dir) / "verdict")
    final = digest.hexdigest()[:16]
    with Dir.open(parent) as root:
        if _holds(root, final, wanted):
            return parent / final
        with locked(parent, ".lock"):
            if not _holds(root, final, wanted):  # another worker may have made it meanwhile
                _make(root, parent, final, wanted)
    return parent / final


def _holds(root: Dir, name: str, wanted: dict[str, bytes]) -> bool:
    """Whether root/name is this user's dir holding exactly `wanted`, byte for byte."""
    st = root.lstat(name)
    if st is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        return False
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return False
    try:
        with root.opendir(name) as copy:
            if sorted(os.listdir(copy.fd)) != sorted(wanted):
                return False  # a file more (a sitecustomize.py on PYTHONPATH) is no copy
            for file, data in wanted.items():
                found = copy.lstat(file)
                if found is None or found.st_uid != os.geteuid() or \
                        found.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    return False
                if copy.read_bytes(file, cap=len(data)) != data:
                    return False
    except OSError:  # a link, a fifo, a file over the size: not the copy
        return False
    return True


def _make(root: Dir, parent: Path, name: str, wanted: dict[str, bytes]) -> None:
    """Put a fresh copy of `wanted` at root/name, removing whatever is there first."""
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=parent)).name  # 0700, O_EXCL
    try:
        with root.opendir(staging) as copy:
            for file, data in wanted.items():
                copy.write_atomic(file, data, 0o444)
            os.fchmod(copy.fd, 0o555)
        remove_tree(root, name)
        os.rename(staging, name, src_dir_fd=root.fd, dst_dir_fd=root.fd)
    finally:
        remove_tree(root, staging)  # gone when the rename happened


@dataclass(frozen=True)
class Mark:
    """When a record arrived: monotonic time, and how many bytes of stdout and stderr the
    run had written by then (to cut its output at a test's start)."""

    at: float = 0.0
    stdout: int = 0
    stderr: int = 0


class OutputCount(OutputTally):
    """The run's output, counted as the sandbox reads it; mark() says where it stands."""

    def mark(self) -> Mark:
        """Now, and the bytes of stdout and stderr written so far (read or still in the
        pipes: output written before a record is always before its mark)."""
        at = self.positions()
        return Mark(time.monotonic(), at.get("stdout", 0), at.get("stderr", 0))


@dataclass
class Records:
    """What came over the channel: the records, and what was wrong with the stream;
    `marks[i]` is when `records[i]` arrived (empty when nothing counted the output)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)


class Channel:
    """A pipe whose write end goes into the sandbox; read on a thread until closed."""

    def __init__(self, output: OutputCount | None = None) -> None:
        self._read, self.fd = os.pipe2(os.O_CLOEXEC)
        self._data = bytearray()
        self._dropped = 0
        # The run's output as it goes: each line's arrival is marked with its position.
        self.output = output
        self._marks: list[Mark] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def __enter__(self) -> Channel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _pump(self) -> None:
        """Read until EOF (every write end closed) or until told to stop."""
        while True:
            ready, _, _ = select.select([self._read], [], [], 0.2)
            if not ready:
                if self._stop.is_set():
                    return
                continue
            chunk = os.read(self._read, 65536)
            if not chunk:
                return
            room = CAP - len(self._data)
            self._data += chunk[: max(room, 0)]
            self._dropped += max(0, len(chunk) - max(room, 0))
            if self.output is not None:
                self._marks += [self.output.mark()] * chunk[: max(room, 0)].count(b"\n")

    def close(self) -> Records:
        """Close the worker's write end, drain what the run wrote, and parse it."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self._thread.join(_DRAIN_S)  # EOF unless a process outlived the run
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            os.close(self._read)
        out = parse(bytes(self._data), self._dropped)
        if self.output is not None and not out.problems:
            out.marks = self._marks[: len(out.records)]
        return out


def parse(data: bytes, dropped: int = 0) -> Records:
    """JSON lines into records; anything else is a problem with the stream."""
    out = Records()
    if dropped:
        out.problems.append(f"the channel carried more than {CAP} bytes")
    lines = data.split(b"\n")
    if lines and lines[-1]:
        out.problems.append("the channel ended in the middle of a line")
    for raw in lines[:-1]:
        try:
            record = json.loads(raw)
        except ValueError:
            out.problems.append(f"the channel carried a line that is not JSON: {raw[:80]!r}")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("e"), str):
            out.problems.append(f"the channel carried a line that is not a record: {raw[:80]!r}")
            continue
        out.records.append(record)
    return out
