"""Live output of test runs: what a running test prints, in a Redis stream as it is read.

devloop:{pid}:output:{unit}:{run}   stream  {s: "stdout" | "stderr", d: text}, then {end: 1}
devloop:{pid}:output:{unit}:runs    list    the unit's run ids, newest first (the last N)

The runner's pipe readers hand each chunk to `LiveOutput`, which buffers it and writes at
most every `flush_s` from a thread of its own, so a chatty test costs a few writes a
second. Each run's stream is capped; a unit keeps the streams of its last `keep` runs.
A run starting is announced on the project's events stream (kind "output").
"""

from __future__ import annotations

import codecs
import logging
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import redis

from devloop.ids import check_id
from devloop.store import RedisStore
from devloop.store.keys import EVENTS_MAXLEN

if TYPE_CHECKING:
    from redis.client import Pipeline

log = logging.getLogger(__name__)
FLUSH_S = 0.2
STREAMS = ("stdout", "stderr")


def runs_key(store: RedisStore, pid: str, unit: str) -> str:
    return f"{store.keys(pid).prefix}output:{check_id(unit, 'unit id')}:runs"


def output_key(store: RedisStore, pid: str, unit: str, run_id: str) -> str:
    unit, run_id = check_id(unit, "unit id"), check_id(run_id, "run id")
    return f"{store.keys(pid).prefix}output:{unit}:{run_id}"


class LiveOutput:
    """The live stream of one test run: a context manager, and the runner's output sink."""

    def __init__(
        self,
        store: RedisStore,
        pid: str,
        unit: str,
        run_id: str,
        *,
        cap_bytes: int,
        keep: int,
        flush_s: float = FLUSH_S,
    ) -> None:
        self.store, self.pid, self.unit, self.run_id = store, pid, unit, run_id
        self.key = output_key(store, pid, unit, run_id)
        self.cap, self.keep, self.flush_s = cap_bytes, max(1, keep), flush_s
        self.sent = 0
        self._pending: dict[str, list[str]] = {name: [] for name in STREAMS}
        self._decoders = {name: codecs.getincrementaldecoder("utf-8")("replace")
                          for name in STREAMS}
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._flush_loop, daemon=True)

    def __enter__(self) -> LiveOutput:
        self._begin()
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        self._flush(final=True)

    def __call__(self, stream: str, chunk: bytes) -> None:
        """One chunk the runner read (called from its pipe-reading threads)."""
        with self._lock:
            room = self.cap - self.sent
            if room <= 0:
                return
            kept = chunk[:room]
            self.sent += len(kept)
            text = self._decoders[stream].decode(kept)
            if len(kept) < len(chunk) or self.sent >= self.cap:
                text += f"\n[... live output capped at {self.cap} bytes ...]\n"
                self.sent = self.cap
            if text:
                self._pending[stream].append(text)

    def _begin(self) -> None:
        """A fresh stream for the run, the unit's run list trimmed, the run announced."""
        runs = runs_key(self.store, self.pid, self.unit)
        try:
            with self.store.client.pipeline(transaction=True) as pipe:
                pipe.delete(self.key)
                pipe.lrem(runs, 0, self.run_id)
                pipe.lpush(runs, self.run_id)
                pipe.lrange(runs, self.keep, -1)
                pipe.ltrim(runs, 0, self.keep - 1)
                old = pipe.execute()[3]
            with self.store.client.pipeline(transaction=False) as pipe:
                for run in old:
                    pipe.delete(output_key(self.store, self.pid, self.unit, run.decode()))
                self._announce(pipe, "output")
                pipe.execute()
        except redis.RedisError:
            log.warning("live output of %s %s cannot be started", self.unit, self.run_id,
                        exc_info=True)

    def _announce(self, pipe: Pipeline, kind: str) -> None:
        """Queue the project's live event that this run's output started or ended."""
        pipe.xadd(self.store.keys(self.pid).events,
                  {"kind": kind, "unit": self.unit, "run": self.run_id},
                  maxlen=EVENTS_MAXLEN, approximate=True)

    def _flush_loop(self) -> None:
        while not self._stopped.wait(self.flush_s):
            self._flush()

    def _flush(self, final: bool = False) -> None:
        with self._lock:
            if final:  # half a character the run never finished is shown as one
                for name, decoder in self._decoders.items():
                    if tail := decoder.decode(b"", final=True):
                        self._pending[name].append(tail)
            batch = {name: "".join(parts) for name, parts in self._pending.items() if parts}
            self._pending = {name: [] for name in STREAMS}
        try:
            with self.store.client.pipeline(transaction=False) as pipe:
                for name, text in batch.items():
                    pipe.xadd(self.key, {"s": name, "d": text.encode("utf-8")})
                if final:
                    pipe.xadd(self.key, {"end": "1"})
                    self._announce(pipe, "output_end")
                pipe.execute()
        except redis.RedisError:
            log.warning("live output of %s %s lost a chunk", self.unit, self.run_id,
                        exc_info=True)


@dataclass
class OutputSoFar:
    """What a run printed so far: text per stream, the last entry id, whether it ended."""

    run_id: str | None
    chunks: list[tuple[str, str]]  # (stream, text) in order
    last_id: str = "0-0"
    ended: bool = False

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.chunks)


def latest_run(store: RedisStore, pid: str, unit: str) -> str | None:
    """The unit's newest run with live output, if any."""
    raw = store.client.lindex(runs_key(store, pid, unit), 0)
    return raw.decode() if raw else None


def read_output(
    store: RedisStore, pid: str, unit: str, run_id: str | None, after: str = "0-0"
) -> OutputSoFar:
    """The run's live output after entry `after` (everything by default)."""
    if run_id is None:
        return OutputSoFar(None, [])
    entries = store.client.xrange(output_key(store, pid, unit, run_id), min=f"({after}"
                                  if after != "0-0" else "-")
    out = OutputSoFar(run_id, [], after)
    for entry_id, fields in entries:
        out.last_id = entry_id.decode()
        out.ended = out.ended or b"end" in fields
        chunk = output_chunk(fields)
        if chunk is not None:
            out.chunks.append(chunk)
    return out


def output_chunk(fields: dict[Any, Any]) -> tuple[str, str] | None:
    """(stream, text) of one output stream entry, or None for the end marker."""
    data = fields.get(b"d")
    if data is None:
        return None
    stream = fields.get(b"s", b"stdout").decode()
    return stream, data.decode("utf-8", errors="replace")
