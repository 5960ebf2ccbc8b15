"""timeline.ndjson: what happened to which unit, one JSON event per line."""

from __future__ import annotations

import logging

from pydantic import ValidationError

from devloop.core.models import TimelineEvent
from devloop.ledgers.sink import AppendSink, Clock, dumps_line, iso_z, read_json_lines, utc_now

log = logging.getLogger(__name__)

# Who writes which kinds. The loop's events (loop_pass, loop_block, ...) carry this agent and
# are the only ones the report believes; a role's timeline_append tool writes its own kinds.
LOOP_AGENT = "loop"
ROLE_KINDS: dict[str, tuple[str, ...]] = {
    "coder": ("unit_coded", "code_patched"),
    "tester": ("unit_tested", "test_failed", "test_passed"),
}


class Timeline:
    """Append and read timeline events (kinds: unit_coded, code_patched, unit_tested, ...)."""

    def __init__(self, sink: AppendSink, now: Clock = utc_now) -> None:
        self.sink = sink
        self._now = now

    def append(
        self,
        kind: str,
        unit_id: str | None = None,
        ref: str | None = None,
        summary: str = "",
        agent: str | None = None,
    ) -> TimelineEvent:
        """Record one event stamped now, and return it."""
        event = stamped(kind, unit_id, ref, summary, agent, self._now)
        self.sink.append(dumps_line(event.to_json_dict()))
        return event

    def events(self, unit_id: str | None = None, kind: str | None = None) -> list[TimelineEvent]:
        """Events in order, optionally only one unit's or one kind's; unknown fields kept."""
        out: list[TimelineEvent] = []
        for obj in read_json_lines(self.sink):
            try:
                event = TimelineEvent.model_validate(obj)
            except ValidationError as exc:
                log.warning("%r: invalid timeline line skipped: %s", self.sink, exc)
                continue
            if unit_id not in (None, event.unit_id) or kind not in (None, event.kind):
                continue
            out.append(event)
        return out


def stamped(
    kind: str, unit_id: str | None = None, ref: str | None = None, summary: str = "",
    agent: str | None = None, now: Clock = utc_now,
) -> TimelineEvent:
    """One event stamped now (ValueError without a kind)."""
    if not kind:
        raise ValueError("timeline event needs a kind, e.g. 'unit_tested'")
    return TimelineEvent(
        ts=iso_z(now()), kind=kind, unit_id=unit_id, ref=ref, summary=summary, agent=agent
    )


def loop_line(kind: str, unit_id: str, ref: str | None = None, summary: str = "") -> str:
    """A loop event stamped now, as its line: for a state change that writes it in the same
    step (store.state.WithState), so no crash leaves one without the other."""
    return dumps_line(stamped(kind, unit_id, ref, summary, LOOP_AGENT).to_json_dict())
