"""Live output of a test run: the runner's output sink, written to the store as it reads.

The runner's pipe readers hand each chunk to `LiveOutput`, which buffers it and writes at
most every `flush_s` from a thread of its own, so a chatty test costs a few writes a
second. Each run's output is capped; the store keeps a unit's last `keep` runs
(store/output.py).
"""

from __future__ import annotations

import codecs
import logging
import threading
from types import TracebackType

from devloop.store.base import StoreError
from devloop.store.protocols_live import OutputStore

log = logging.getLogger(__name__)
FLUSH_S = 0.2
STREAMS = ("stdout", "stderr")


class LiveOutput:
    """The live stream of one test run: a context manager, and the runner's output sink."""

    def __init__(
        self,
        store: OutputStore,
        pid: str,
        unit: str,
        run_id: str,
        *,
        cap_bytes: int,
        keep: int,
        flush_s: float = FLUSH_S,
    ) -> None:
        self.store, self.pid, self.unit, self.run_id = store, pid, unit, run_id
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
        try:
            self.store.start_output(self.pid, self.unit, self.run_id, self.keep)
        except StoreError:
            log.warning("live output of %s %s cannot be started", self.unit, self.run_id,
                        exc_info=True)

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
        if not batch and not final:
            return
        try:
            self.store.add_output(self.pid, self.unit, self.run_id, batch, end=final)
        except StoreError:
            log.warning("live output of %s %s lost a chunk", self.unit, self.run_id,
                        exc_info=True)
