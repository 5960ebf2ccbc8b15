"""The verdict channel: test results streamed to the worker over a pipe, as tests finish.

The worker creates a pipe and passes its write end into the sandbox (fd number in
VERDICT_FD); a pytest plugin (`verdict_channel.py`) or a vitest reporter
(`vitest_reporter.mjs`) writes one JSON line per event to it; `vitest_guard.mjs`, a setup
file in each vitest worker, checks that the code under test left the framework alone.
Those files ship in this package and are copied once into a world-readable dir under
the cache, which the runners bind read-only: the sandbox can neither edit them nor
rewrite a line once it is sent. A thread reads the pipe while the run goes, keeping at
most `CAP` bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devloop.sandbox.base import ensure_public_dir
from devloop.sandbox.process import OutputSink

HERE = Path(__file__).resolve().parent
FILES = ("verdict_channel.py", "vitest_reporter.mjs", "vitest_guard.mjs", "hollow.cjs")
PYTEST_PLUGIN = "verdict_channel"
VITEST_REPORTER = "vitest_reporter.mjs"
VITEST_GUARD = "vitest_guard.mjs"
HOLLOW_SCRIPT = "hollow.cjs"  # the node hollow build (devloop/runners/hollow_py.py's twin)
CAP = 8 * 1024 * 1024
_DRAIN_S = 2.0


def plugin_dir(cache_dir: Path) -> Path:
    """The read-only copy of the plugin and the reporter, made once per content."""
    digest = hashlib.sha256()
    for name in FILES:
        digest.update(name.encode() + b"\0" + (HERE / name).read_bytes())
    parent = ensure_public_dir(cache_dir / "verdict")
    final = parent / digest.hexdigest()[:16]
    if final.is_dir():
        return final
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=parent))
    try:
        for name in FILES:
            shutil.copyfile(HERE / name, staging / name)
            (staging / name).chmod(0o444)
        staging.chmod(0o555)
        os.rename(staging, final)
    except OSError:
        if not final.is_dir():  # another worker winning the rename is fine
            raise
    finally:
        if staging.exists():
            staging.chmod(0o755)
            shutil.rmtree(staging, ignore_errors=True)
    return final


@dataclass(frozen=True)
class Mark:
    """When a record arrived: monotonic time, and how many bytes of stdout and stderr the
    run had written by then (to cut its output at a test's start)."""

    at: float = 0.0
    stdout: int = 0
    stderr: int = 0


class OutputCount:
    """Counts the bytes of each stream a run wrote, forwarding the chunks to `sink`."""

    def __init__(self, sink: OutputSink | None = None) -> None:
        self.sink = sink
        self.bytes = {"stdout": 0, "stderr": 0}

    def __call__(self, name: str, chunk: bytes) -> None:
        self.bytes[name] = self.bytes.get(name, 0) + len(chunk)
        if self.sink is not None:
            self.sink(name, chunk)

    def mark(self) -> Mark:
        """Now, and the bytes written so far."""
        return Mark(time.monotonic(), self.bytes["stdout"], self.bytes["stderr"])


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
