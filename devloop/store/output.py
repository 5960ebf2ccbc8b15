"""Live output of test runs: what a running test prints, one stream per run.

A unit keeps the streams of its last few runs (`Keys.output_runs`, newest first); a run's
stream holds {s: stdout|stderr, d: text} entries, then {end: 1}. A run starting or ending
is announced on the project's events stream (kinds "output" and "output_end").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devloop.store.base import StoreBase, text
from devloop.store.keys import EVENTS_MAXLEN

Entry = tuple[str, dict[bytes, bytes]]  # a stream entry: its id and its fields


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


def output_chunk(fields: Mapping[Any, Any]) -> tuple[str, str] | None:
    """(stream, text) of one output stream entry, or None for the end marker."""
    data = fields.get(b"d")
    if data is None:
        return None
    stream = fields.get(b"s", b"stdout").decode()
    return stream, data.decode("utf-8", errors="replace")


def output_so_far(run_id: str | None, entries: list[Entry], after: str = "0-0") -> OutputSoFar:
    """The output a run's entries after `after` tell."""
    out = OutputSoFar(run_id, [], after)
    for entry_id, fields in entries:
        out.last_id = entry_id
        out.ended = out.ended or b"end" in fields
        chunk = output_chunk(fields)
        if chunk is not None:
            out.chunks.append(chunk)
    return out


def run_event(kind: str, unit: str, run_id: str) -> dict[str, str]:
    """The live event of a run's output starting ("output") or ending ("output_end")."""
    return {"kind": kind, "unit": unit, "run": run_id}


class OutputMixin(StoreBase):
    """`start_output`, `add_output`, `latest_output_run` and `read_output`."""

    def start_output(self, pid: str, unit: str, run_id: str, keep: int) -> None:
        """A fresh stream for the run, the unit's run list trimmed to its `keep` newest
        (the older runs' streams dropped), the run announced."""
        keys = self.keys(pid)
        runs, key = keys.output_runs(unit), keys.output(unit, run_id)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            pipe.lrem(runs, 0, run_id)
            pipe.lpush(runs, run_id)
            pipe.lrange(runs, keep, -1)
            pipe.ltrim(runs, 0, keep - 1)
            old = pipe.execute()[3]
        with self.client.pipeline(transaction=False) as pipe:
            for run in old:
                pipe.delete(keys.output(unit, run.decode()))
            pipe.xadd(keys.events, run_event("output", unit, run_id),
                      maxlen=EVENTS_MAXLEN, approximate=True)
            pipe.execute()

    def add_output(self, pid: str, unit: str, run_id: str, chunks: Mapping[str, str],
                   end: bool = False) -> None:
        """Append the chunks (stream -> text) to the run's stream; with end, its end marker
        and the event that it ended."""
        keys = self.keys(pid)
        key = keys.output(unit, run_id)
        with self.client.pipeline(transaction=False) as pipe:
            for name, data in chunks.items():
                pipe.xadd(key, {"s": name, "d": data.encode("utf-8")})
            if end:
                pipe.xadd(key, {"end": "1"})
                pipe.xadd(keys.events, run_event("output_end", unit, run_id),
                          maxlen=EVENTS_MAXLEN, approximate=True)
            pipe.execute()

    def latest_output_run(self, pid: str, unit: str) -> str | None:
        """The unit's newest run with live output, if any."""
        return text(self.client.lindex(self.keys(pid).output_runs(unit), 0))

    def output_runs(self, pid: str, unit: str) -> list[str]:
        """The unit's runs with live output kept, newest first."""
        return [r.decode() for r in self.client.lrange(self.keys(pid).output_runs(unit), 0, -1)]

    def read_output(self, pid: str, unit: str, run_id: str | None,
                    after: str = "0-0") -> OutputSoFar:
        """The run's live output after entry `after` (everything by default)."""
        if run_id is None:
            return OutputSoFar(None, [])
        low = f"({after}" if after != "0-0" else "-"
        entries = self.client.xrange(self.keys(pid).output(unit, run_id), min=low)
        return output_so_far(run_id, [(i.decode(), f) for i, f in entries], after)
