"""The ledgers by unit: each entry that belongs to a unit is also in a stream of that unit's
own, written in the same Lua call as the entry, so a unit's history (its page in the
console) is read without reading the whole ledger.

    devloop:{pid}:unit:{unit}:{ledger}   stream  the unit's entries, same ids and lines
    devloop:{pid}:bug-units              hash    bug id -> unit: a bug_transition line names
                                                 only its bug, the bug_open line its unit
    devloop:{pid}:ledger-index           hash    ledger -> 1 once every entry is indexed

An entry belongs to the unit its `unit_id` names (a bug_transition: its bug's unit). A
ledger written before the index existed is indexed whole by the project's next import and
read whole (then filtered by the reader) until then.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from devloop.core.ids import is_valid_id
from devloop.store import scripts
from devloop.store.fence import Fence, fenced
from devloop.store.keys import Keys, Ledger

BugUnit = Callable[[str], str | None]  # bug id -> its unit, when known


def entry_place(line: str | bytes, bug_unit: BugUnit) -> tuple[str | None, str | None]:
    """(the unit an entry belongs to, the bug id it opens) of one ledger line."""
    try:
        record = json.loads(line)
    except ValueError:
        return None, None
    if not isinstance(record, dict):
        return None, None
    unit = record.get("unit_id")
    bug = record.get("id") if record.get("event") in ("bug_open", "bug_transition") else None
    if unit is None and record.get("event") == "bug_transition" and isinstance(bug, str):
        unit = bug_unit(bug)
    if not isinstance(unit, str) or not is_valid_id(unit):
        return None, None
    opens = bug if record.get("event") == "bug_open" and isinstance(bug, str) else None
    return unit, opens


@dataclass(frozen=True)
class LedgerIndex:
    """Where one ledger of one project is indexed by unit."""

    keys: Keys
    ledger: Ledger

    def bug_unit(self, client: redis.Redis) -> BugUnit:
        def lookup(bug: str) -> str | None:
            raw = client.hget(self.keys.bug_units, bug)
            return raw.decode() if raw else None

        return lookup

    def call(self, line: bytes, unit: str | None, opens: str | None,
             fence: Fence | None = None) -> tuple[list[str], list[Any]]:
        """LEDGER_APPEND's keys and arguments for one line."""
        stream = self.keys.stream(self.ledger)
        keys = [stream, self.keys.unit_ledger(self.ledger, unit) if unit else stream,
                self.keys.bug_units, self.keys.ledger_index]
        args: list[Any] = [line, unit or "", opens or "", self.ledger]
        if fence is not None:
            keys.append(fence.lease)
            args.append(fence.owner)
        return keys, args

    def append(self, client: redis.Redis, line: bytes, fence: Fence | None = None) -> None:
        """Add one entry to the ledger and to its unit's stream (while fence holds)."""
        unit, opens = entry_place(line, self.bug_unit(client))
        keys, args = self.call(line, unit, opens, fence)
        with fenced(fence):
            client.register_script(scripts.LEDGER_APPEND)(keys=keys, args=args)
