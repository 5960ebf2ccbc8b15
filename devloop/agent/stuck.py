"""Stuck detection on measured behaviour, never on the model's own judgement. Pure.

Each pattern has a threshold; the first one reached trips:

- the same tool call N times in a row;
- the same error N times, once numbers, timings, temp paths and addresses are normalised
  out (`normalise`), so "took 41 ms at 0x7f3a" and "took 39 ms at 0x7f9c" are one error;
- the tests red with the same failures N times in a row (the coder's verify, the
  tester's run_tests);
- the same file rewritten in N turns while the test outcome stays what it was;
- no change to the workspace for N turns.

Progress resets the counts: a test passes that did not pass before, or a new file is
written. The test outcome and the most tests seen passing are measurements, kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Most specific first: a temp path holds numbers, a timing is a number with a unit.
_NORMALISERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:/private)?/(?:var/)?tmp/[^\s'\"`:,;)\]]*"), "<tmp>"),
    (re.compile(r"/var/folders/[^\s'\"`:,;)\]]*"), "<tmp>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<addr>"),
    (re.compile(r"\b\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?"), "<ts>"),
    (
        re.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
        ),
        "<uuid>",
    ),
    (re.compile(r"\b[0-9a-f]{12,}\b"), "<hex>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds?|m|min)\b"), "<time>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)
ERROR_KEY_CHARS = 300


def normalise(text: str) -> str:
    """An error as its shape: temp paths, addresses, timestamps, timings and numbers out."""
    for pattern, token in _NORMALISERS:
        text = pattern.sub(token, text)
    return " ".join(text.split())[:ERROR_KEY_CHARS]


@dataclass(frozen=True)
class TestTally:
    """What one test run showed: counts and the failing tests (names), or why it crashed."""

    __test__ = False  # not a pytest test class

    total: int
    passed: int
    failed: tuple[str, ...] = ()
    crashed: str | None = None

    @property
    def green(self) -> bool:
        return self.crashed is None and not self.failed and self.total > 0

    def signature(self) -> str:
        """The outcome as one comparable string (crash reasons normalised)."""
        if self.crashed is not None:
            return "crashed: " + normalise(self.crashed)
        return "failed: " + "\n".join(sorted(normalise(name) for name in self.failed))


@dataclass(frozen=True)
class StuckThresholds:
    """When a session counts as stuck."""

    same_call: int = 3  # the same tool call this many times in a row
    same_error: int = 3  # the same (normalised) error observation this many times
    idle_turns: int = 8  # turns in a row with no change to the workspace
    same_failures: int = 3  # test runs in a row, red with the same failures
    file_rewrites: int = 4  # turns writing the same file while the test outcome stays put


@dataclass
class StuckTracker:
    """Counts the patterns above; says which threshold tripped, and why, in words."""

    thresholds: StuckThresholds = field(default_factory=StuckThresholds)
    last_call: str | None = None
    call_repeats: int = 0
    error_counts: dict[str, int] = field(default_factory=dict)
    idle_turns: int = 0
    last_fingerprint: str | None = None
    outcome: str | None = None  # the last test run's signature
    outcome_repeats: int = 0  # red runs in a row with that signature
    failing: list[str] = field(default_factory=list)  # the last run's failing tests
    best_passed: int = -1  # the most tests seen passing in one run
    rewrites: dict[str, int] = field(default_factory=dict)  # path -> turns written

    def observe_call(self, name: str, args: Any, error: str | None) -> None:
        """Record one tool call and its error text, if it failed."""
        call = name + json.dumps(args, sort_keys=True, default=str)
        self.call_repeats = self.call_repeats + 1 if call == self.last_call else 1
        self.last_call = call
        if error:
            key = normalise(error)
            self.error_counts[key] = self.error_counts.get(key, 0) + 1

    def observe_turn(
        self, fingerprint: str, written: Iterable[str] = (), created: Iterable[str] = ()
    ) -> None:
        """Record a turn: the workspace's fingerprint after it, the files it wrote (each
        counts once per turn) and those it created (progress)."""
        self.idle_turns = self.idle_turns + 1 if fingerprint == self.last_fingerprint else 0
        self.last_fingerprint = fingerprint
        if list(created):
            self._progress()
            return
        if self.outcome is None:
            return  # rewrites count against a known test outcome only
        for path in set(written):
            self.rewrites[path] = self.rewrites.get(path, 0) + 1

    def observe_tests(self, tally: TestTally) -> bool:
        """Record a test run; True when it made progress (a test passes that did not)."""
        signature = tally.signature()
        newly_passing = tally.crashed is None and (
            0 <= self.best_passed < tally.passed or bool(set(self.failing) - set(tally.failed))
        )
        if signature != self.outcome:
            self.rewrites = {}  # the outcome changed: rewrites count from here
        red = not tally.green
        same = red and signature == self.outcome
        self.outcome_repeats = self.outcome_repeats + 1 if same else (1 if red else 0)
        self.outcome = signature
        if tally.crashed is None:
            self.failing = list(tally.failed)
            self.best_passed = max(self.best_passed, tally.passed)
        if newly_passing:
            self._progress()
        return newly_passing

    def seed(self, baseline: TestTally) -> None:
        """Start from a run the runtime made before the session (a retry's BASELINE): it
        sets the outcome and the best count, and is not a repeat of anything."""
        self.observe_tests(baseline)
        self.outcome_repeats = 0

    def _progress(self) -> None:
        """Progress was made: the repetition counts start again."""
        self.last_call, self.call_repeats, self.idle_turns = None, 0, 0
        self.error_counts, self.rewrites = {}, {}

    def tripped(self) -> str | None:
        """Which threshold fired, in words, or None."""
        t = self.thresholds
        if self.call_repeats >= t.same_call:
            return f"the same tool call {self.call_repeats} times in a row"
        for error, count in self.error_counts.items():
            if count >= t.same_error:
                return f"the same error {count} times (numbers and paths aside): {error[:160]}"
        if self.outcome_repeats >= t.same_failures and self.outcome is not None:
            shown = ", ".join(self.failing[:3]) or self.outcome[:160]
            return (
                f"the tests were red with the same failures {self.outcome_repeats} times in a "
                f"row ({shown})"
            )
        for path, count in sorted(self.rewrites.items()):
            if count >= t.file_rewrites:
                return f"{path} was rewritten in {count} turns with no change in the test outcome"
        if self.idle_turns >= t.idle_turns:
            return f"no change to the workspace for {self.idle_turns} turns"
        return None

    def reset(self) -> None:
        """Forget the counts (after a reassess turn re-planned the work); keep what the
        tests showed."""
        self._progress()
        self.outcome_repeats = 0

    def to_dict(self) -> dict[str, Any]:
        """Checkpoint form."""
        return {
            "last_call": self.last_call,
            "call_repeats": self.call_repeats,
            "error_counts": self.error_counts,
            "idle_turns": self.idle_turns,
            "last_fingerprint": self.last_fingerprint,
            "outcome": self.outcome,
            "outcome_repeats": self.outcome_repeats,
            "failing": self.failing,
            "best_passed": self.best_passed,
            "rewrites": self.rewrites,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], thresholds: StuckThresholds) -> StuckTracker:
        """Restore from a checkpoint (one saved before a field existed gets its default)."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(thresholds=thresholds, **known)
