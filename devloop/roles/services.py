"""What role tools act on besides the view: ledgers, agent state, memory, the test runner."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from devloop.core.config import Settings
from devloop.core.models import RunResult, UnitsFile
from devloop.ledgers import BugLedger, Timeline
from devloop.roles.adequacy import Claims
from devloop.runners.base import TestRunner
from devloop.safe.owned import OwnedFiles
from devloop.sandbox.process import OutputSink
from devloop.upstream.mount import Upstream

# A role's files of one unit under agent-state/: runtime state, todolist, the model's words
# for its timeline events. A reset drops each (devloop.fleet.wipe): add a new one here.
ROLE_STATE_TAILS = ("", "-todo", "-narrative")


def role_state_name(role: str, unit: str, tail: str) -> str:
    """The agent-state/ file name of a role's state of one unit (a ROLE_STATE_TAILS tail)."""
    return f"{role}-{unit}{tail}.json"


@dataclass
class RoleServices:
    """One session's handles on shared state; tools reach it as ctx.services["role"]."""

    pid: str
    unit_id: str
    role: str
    attempt: int
    units: UnitsFile
    bugs: BugLedger
    timeline: Timeline
    # agent-state/<path> -> bytes, and memory/devloop/<role>/<name>.md -> text.
    save_state: Callable[[str, bytes], None]
    save_memory: Callable[[str, str], None]
    # Unit-relative paths the session changed outside its write set (sandbox_check).
    violations: Callable[[], list[str]] = lambda: []
    runner: TestRunner | None = None
    run_id: str | None = None
    retry_budget_left: int = 0
    todo: list[dict[str, Any]] = field(default_factory=list)
    runtime: dict[str, Any] = field(default_factory=dict)
    # What the tester's run_tests produced last (the runtime's self-check reads it).
    last_run: dict[str, Any] | None = None
    mode: str = ""
    # The coder's own runs of the existing tests (roles/verify.py): the baseline of this
    # attempt, how many verify runs it made, and the last one with a digest of code/ then.
    baseline: RunResult | None = None
    verify_runs: int = 0
    last_verify: dict[str, Any] | None = None
    # A coder retry: the tests the tester's last run found failing (reflections name one).
    failing_tests: list[str] = field(default_factory=list)
    # run id -> where a test run's output goes while it runs (the console's live view).
    live_output: Callable[[str], AbstractContextManager[OutputSink]] | None = None
    # What a green run's tests must prove (roles/hollowrun.py), and where views are made.
    claims: Claims | None = None
    settings: Settings | None = None
    # The view's tool-owned files (the workspace's): what run_tests and set_hint wrote.
    owned: OwnedFiles = field(default_factory=OwnedFiles)
    # The units this one depends on, as its runs import them (devloop.upstream).
    upstream: Upstream | None = None
    # The unit's stack and kind (the syntax check depends on both).
    stack: str = "python"
    kind: str = ""
    # Unit-relative paths the session changed so far in its write set (the workspace's
    # diff): the facts a coder.log entry's changed_files states.
    changed: Callable[[], list[str]] = lambda: []
    # timeline kind -> what the model said of it (timeline_append): the narrative the
    # runtime puts on its own event for that fact (devloop/roles/derive.py).
    narrative: dict[str, str] = field(default_factory=dict)

    def record(self, rel: str, data: bytes) -> None:
        """A tool of this session wrote a file it owns (kept when the view has no record)."""
        if self.owned.get(rel) is not None:
            self.owned.wrote(rel, data)

    @property
    def todo_path(self) -> str:
        return role_state_name(self.role, self.unit_id, "-todo")

    @property
    def runtime_path(self) -> str:
        return role_state_name(self.role, self.unit_id, "")

    @property
    def narrative_path(self) -> str:
        return role_state_name(self.role, self.unit_id, "-narrative")

    def persist_narrative(self) -> None:
        """Write what the model said of its timeline events to agent-state/ (a resumed
        session keeps it for the runtime's events)."""
        record = {"attempt": self.attempt, "run_id": self.run_id, "notes": self.narrative}
        self.save_state(self.narrative_path, json.dumps(record, ensure_ascii=False).encode())

    def load_narrative(self, saved: bytes | None) -> None:
        """Take back the narrative a resumed session saved for this attempt (and run)."""
        record = json.loads(saved) if saved else {}
        if record.get("attempt") == self.attempt and record.get("run_id") == self.run_id:
            self.narrative = dict(record.get("notes") or {})

    def persist_todo(self) -> None:
        """Write the todolist to agent-state/."""
        self.save_state(self.todo_path, json.dumps(self.todo, ensure_ascii=False).encode())

    def persist_runtime(self) -> None:
        """Write the runtime state (step, total, status) to agent-state/."""
        self.save_state(self.runtime_path, json.dumps(self.runtime, ensure_ascii=False).encode())
