"""bugs.ndjson: bug_open / bug_transition events, folded into current bug states.

The life of a bug::

    open --> fixing --> fixed    the loop moves open bugs to fixing when a coder retry
      |                   ^      starts on them; a green run fixes them
      +-------------------+      a green run fixes an open bug directly
    fixing --> open              the test failed again while it was being fixed
    fixed  --> open              the test failed again: the same bug is reopened

De-duplication is by `{unit}:{test}`: a failing test that already has an open bug gets
that bug back; one whose bug is fixing or fixed reopens it (a `bug_transition` to `open`
carrying the `run_id` that failed) instead of opening a new bug, so a regression keeps
its id and its whole history.

The ledger reads the events back before it decides, so two writers deciding about the
same unit at the same moment could both open a bug. DevLoop never does that: a unit has
at most one tester session at a time (leases). The fold tolerates it anyway.
"""

from __future__ import annotations

import builtins
import logging
import secrets
from collections.abc import Collection, Iterable

from pydantic import ValidationError

from devloop.core.errors import DevLoopError
from devloop.core.models import Bug, BugOpen, BugStatus, BugTransition
from devloop.ledgers.sink import AppendSink, Clock, dumps_line, iso_z, read_json_lines, utc_now

log = logging.getLogger(__name__)

LIVE: frozenset[BugStatus] = frozenset({"open", "fixing"})
ID_RANDOM_BYTES = 8  # 64 bits after the readable bug-YYYYMMDD-HHMM- prefix

# Legal moves: from-status -> the statuses it may go to.
MOVES: dict[str, frozenset[BugStatus]] = {
    "open": frozenset({"fixing", "fixed"}),
    "fixing": frozenset({"fixed", "open"}),
    "fixed": frozenset({"open"}),
}


_EVENT_MODELS: dict[str, type[BugOpen] | type[BugTransition]] = {
    "bug_open": BugOpen,
    "bug_transition": BugTransition,
}


class BugTransitionError(DevLoopError):
    """A bug_transition the state machine forbids (or for a bug that does not exist)."""

    def __init__(self, bug_id: str, from_: str | None, to: str) -> None:
        self.bug_id = bug_id
        self.from_ = from_
        self.to = to
        if from_ is None:
            message = f"bug {bug_id}: unknown bug id, cannot move it to {to!r}"
        else:
            allowed = ", ".join(sorted(MOVES.get(from_, ()))) or "nowhere"
            message = (
                f"bug {bug_id}: cannot move from {from_!r} to {to!r}; "
                f"from {from_!r} a bug may go to: {allowed}"
            )
        super().__init__(message)


class BugNotOwned(DevLoopError):
    """A session tried to move a bug of another unit: role tools act on their own unit only."""

    def __init__(self, bug_id: str, unit_id: str) -> None:
        self.bug_id, self.unit_id = bug_id, unit_id
        super().__init__(
            f"bug {bug_id}: not a bug of unit {unit_id}, the unit this session works on; "
            "a session may move only its own unit's bugs (bug_list shows them)"
        )


class BugLedger:
    """Open, move and list bugs over an append-only sink of bugs.ndjson lines."""

    def __init__(self, sink: AppendSink, now: Clock = utc_now) -> None:
        self.sink = sink
        self._now = now

    def open(
        self,
        unit_id: str,
        run_id: str,
        test_name: str,
        source: str = "unit_test",
        category: str = "unknown",
        severity: str = "medium",
        title: str | None = None,
        detail: str = "",
        affected_units: Iterable[str] | None = None,
        *,
        by: str = "tester",
    ) -> tuple[Bug, bool]:
        """The bug for this failing test, and whether the ledger changed (opened or reopened)."""
        bugs = self._fold()
        same_key = [b for b in bugs.values() if b.dedup_key == f"{unit_id}:{test_name}"]
        live = [b for b in same_key if b.status in LIVE]
        if live and live[-1].status == "open":
            return live[-1], False
        if same_key:
            # Reopen the bug being fixed, or the latest fixed one; `run_id` is an extra
            # field naming the red run.
            bug = live[-1] if live else same_key[-1]
            return self._move(bug, "open", by, [], run_id=run_id), True
        moment = self._now()
        event = BugOpen(
            id=_new_id(iso_z(moment), taken=bugs.keys()),
            ts=iso_z(moment),
            source=source,
            unit_id=unit_id,
            run_id=run_id,
            test_name=test_name,
            category=category,
            severity=severity,
            title=title or f"{test_name} failed",
            detail=detail,
            affected_units=[unit_id] if affected_units is None else builtins.list(affected_units),
        )
        self.sink.append(dumps_line(event.to_json_dict()))
        return _bug_from(event), True

    def transition(
        self,
        bug_id: str,
        to: BugStatus,
        by: str,
        fix_refs: Iterable[str] = (),
        *,
        owner: str | None = None,
        **extra: object,
    ) -> Bug:
        """Move a bug to `to`, or raise BugTransitionError if the state machine forbids it.

        With `owner` (a session's unit), a bug of any other unit raises BugNotOwned.
        `extra` fields go into the event as they are (the loop adds the `attempt`).
        """
        bug = self.get(bug_id)
        if bug is not None and owner is not None and bug.unit_id != owner:
            raise BugNotOwned(bug_id, owner)
        if bug is None:
            raise BugTransitionError(bug_id, None, to)
        if to not in MOVES[bug.status]:
            raise BugTransitionError(bug_id, bug.status, to)
        return self._move(bug, to, by, builtins.list(fix_refs), **extra)

    def get(self, bug_id: str) -> Bug | None:
        """The current state of one bug, or None if no bug has that id."""
        return self._fold().get(bug_id)

    def list(
        self,
        unit_id: str | None = None,
        status: BugStatus | Iterable[BugStatus] | None = None,
    ) -> builtins.list[Bug]:
        """Current bugs in the order they were opened, filtered by unit and status(es)."""
        wanted = {status} if isinstance(status, str) else None if status is None else set(status)
        return [
            bug
            for bug in self._fold().values()
            if (unit_id is None or bug.unit_id == unit_id)
            and (wanted is None or bug.status in wanted)
        ]

    def events(self) -> builtins.list[BugOpen | BugTransition]:
        """Every valid event line in order, unknown fields kept; other lines are skipped."""
        out: builtins.list[BugOpen | BugTransition] = []
        for obj in read_json_lines(self.sink):
            kind = obj.get("event")
            model = _EVENT_MODELS.get(str(kind))
            if model is None:
                continue  # another tool's event type: not ours to judge
            try:
                out.append(model.model_validate(obj))
            except ValidationError as exc:
                log.warning("%r: invalid %s line skipped: %s", self.sink, kind, exc)
        return out

    def _fold(self) -> dict[str, Bug]:
        """Replay the events into the current state of every bug, keyed by id."""
        bugs: dict[str, Bug] = {}
        for event in self.events():
            if isinstance(event, BugOpen):
                if event.id in bugs:
                    log.warning("%r: second bug_open for %s ignored", self.sink, event.id)
                else:
                    bugs[event.id] = _bug_from(event)
            elif event.id in bugs:
                _apply(bugs[event.id], event)
            else:
                log.warning("%r: bug_transition for unknown %s ignored", self.sink, event.id)
        return bugs

    def _move(
        self, bug: Bug, to: BugStatus, by: str, fix_refs: builtins.list[str], **extra: object
    ) -> Bug:
        """Append a bug_transition and return the bug as it now stands."""
        event = BugTransition.model_validate(
            {"id": bug.id, "ts": iso_z(self._now()), "to": to, "by": by, "fix_refs": fix_refs}
            | extra
        )
        self.sink.append(dumps_line(event.to_json_dict()))
        moved = bug.model_copy(deep=True)
        _apply(moved, event)
        return moved


def _new_id(ts: str, taken: Collection[str]) -> str:
    """bug-YYYYMMDD-HHMM- like the seed, then 64 random bits: an id a session of another
    unit cannot guess (the seed's 16 bits a minute could be), redrawn on a clash."""
    stamp = f"{ts[0:4]}{ts[5:7]}{ts[8:10]}-{ts[11:13]}{ts[14:16]}"
    while (bug_id := f"bug-{stamp}-{secrets.token_hex(ID_RANDOM_BYTES)}") in taken:
        pass
    return bug_id


def _bug_from(event: BugOpen) -> Bug:
    """A bug as its bug_open line describes it."""
    return Bug(
        id=event.id,
        status=event.status,
        unit_id=event.unit_id,
        test_name=event.test_name,
        source=event.source,
        severity=event.severity,
        title=event.title,
        run_id=event.run_id,
        category=event.category,
        detail=event.detail,
        affected_units=list(event.affected_units),
        opened_at=event.ts,
        **(event.model_extra or {}),
    )


def _apply(bug: Bug, event: BugTransition) -> None:
    """Apply one transition to a folded bug (the file is trusted: no state-machine check)."""
    bug.status = event.to
    bug.history.append(event)
