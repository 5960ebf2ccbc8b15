"""Stuck detection on measured behaviour, never on the model's own judgement. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StuckThresholds:
    """When a session counts as stuck."""

    same_call: int = 3  # the same tool call this many times in a row
    same_error: int = 3  # the same error observation this many times
    idle_turns: int = 8  # turns in a row with no change to the workspace


@dataclass
class StuckTracker:
    """Counts repeated calls, repeated errors and idle turns; says which threshold tripped."""

    thresholds: StuckThresholds = field(default_factory=StuckThresholds)
    last_call: str | None = None
    call_repeats: int = 0
    error_counts: dict[str, int] = field(default_factory=dict)
    idle_turns: int = 0
    last_fingerprint: str | None = None

    def observe_call(self, name: str, args: Any, error: str | None) -> None:
        """Record one tool call and its error text, if it failed."""
        call = name + json.dumps(args, sort_keys=True, default=str)
        self.call_repeats = self.call_repeats + 1 if call == self.last_call else 1
        self.last_call = call
        if error:
            key = error[:300]
            self.error_counts[key] = self.error_counts.get(key, 0) + 1

    def observe_turn(self, fingerprint: str) -> None:
        """Record the workspace's fingerprint after a turn."""
        self.idle_turns = self.idle_turns + 1 if fingerprint == self.last_fingerprint else 0
        self.last_fingerprint = fingerprint

    def tripped(self) -> str | None:
        """Which threshold fired, in words, or None."""
        t = self.thresholds
        if self.call_repeats >= t.same_call:
            return f"the same tool call {self.call_repeats} times in a row"
        for error, count in self.error_counts.items():
            if count >= t.same_error:
                return f"the same error {count} times: {error[:120]}"
        if self.idle_turns >= t.idle_turns:
            return f"no change to the workspace for {self.idle_turns} turns"
        return None

    def reset(self) -> None:
        """Forget the counts (after a reassess turn re-planned the work)."""
        self.last_call, self.call_repeats, self.idle_turns = None, 0, 0
        self.error_counts = {}

    def to_dict(self) -> dict[str, Any]:
        """Checkpoint form."""
        return {
            "last_call": self.last_call,
            "call_repeats": self.call_repeats,
            "error_counts": self.error_counts,
            "idle_turns": self.idle_turns,
            "last_fingerprint": self.last_fingerprint,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], thresholds: StuckThresholds) -> StuckTracker:
        """Restore from a checkpoint."""
        return cls(thresholds=thresholds, **data)
