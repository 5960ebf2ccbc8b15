"""Import a project folder into Redis: checked first, written in one MULTI/EXEC, idempotent."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from redis.client import Pipeline

from devloop.project.load import Project
from devloop.store import ondisk, scripts
from devloop.store.base import StoreBase, decode_hash
from devloop.store.filesets import files_digest
from devloop.store.keys import LEDGERS, Keys, Ledger
from devloop.store.ledgerindex import LedgerIndex, entry_place
from devloop.store.records import ImportReport
from devloop.store.snapshot import Snapshot, read_snapshot
from devloop.store.streams import STREAM_FIELD, entry_lines
from devloop.store.synclock import folder_synced

WATCH_RETRIES = 5


@dataclass
class _Plan:
    """The writes an import needs, gathered while the keys are watched."""

    hset: dict[str, dict[str, bytes]] = field(default_factory=dict)
    hdel: dict[str, list[str]] = field(default_factory=dict)
    replace: dict[str, dict[str, bytes]] = field(default_factory=dict)
    # LEDGER_APPEND calls (keys, args): each line the ledgers lack, indexed by unit.
    appends: list[tuple[list[str], list[Any]]] = field(default_factory=list)
    # A unit's stream of a ledger written before the index existed, rebuilt: key -> entries.
    reindex: dict[str, list[tuple[bytes, bytes]]] = field(default_factory=dict)
    changed_units: list[str] = field(default_factory=list)
    # meta key -> what the folder is now known to hold (no content changes with it).
    marks: dict[str, dict[str, bytes]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Whether Redis already holds everything."""
        return not (self.hset or self.hdel or self.replace or self.appends)


class ImportMixin(StoreBase):
    """`import_project`: the project record, unit files, memory, agent state and ledgers."""

    def import_project(self, project: Project) -> ImportReport:
        """Store project in Redis; an unchanged project changes nothing (changed=False)."""
        # Under the folder's sync lock: an export writing it meanwhile could be read torn
        # after it said what it wrote. A folder nothing exported into needs none.
        with folder_synced(project.root, create=False):
            snap = read_snapshot(project, self.file_cap_bytes)  # raises before any write
            plan = self._write(snap)
        return ImportReport(
            pid=snap.pid,
            units=len(snap.unit_files),
            files=sum(len(files) for files in snap.unit_files.values()),
            changed=not plan.empty,
            changed_units=plan.changed_units,
            dropped=snap.dropped,
        )

    def _write(self, snap: Snapshot) -> _Plan:
        """Plan against Redis and write in one MULTI/EXEC, again if a worker commits."""
        keys = self.keys(snap.pid)
        watched = [keys.project, keys.sdd, keys.contracts, keys.specs, keys.memory]
        watched += [keys.agent_state, *(keys.stream(name) for name in LEDGERS)]
        for unit in snap.unit_files:
            watched += [keys.files(unit), keys.meta(unit)]
        for attempt in range(WATCH_RETRIES):
            with self.client.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(*watched)
                    plan = _plan(pipe, keys, snap)
                    pipe.multi()
                    _apply(pipe, plan)
                    pipe.execute()
                    return plan
                except redis.WatchError:
                    # A worker committed meanwhile: plan again against what is there now.
                    if attempt == WATCH_RETRIES - 1:
                        raise
        raise AssertionError("unreachable: the last attempt re-raises")


def _plan(pipe: Any, keys: Keys, snap: Snapshot) -> _Plan:
    """Compare the snapshot with Redis and list the writes.

    pipe is a watched pipeline in immediate mode: its commands answer at once (the
    stubs type those answers as the pipeline, hence Any).
    """
    plan = _Plan()
    # The project's definition is the folder's: stale fields of removed units go too.
    for key, wanted in [
        (keys.project, snap.project),
        (keys.sdd, snap.sdd),
        (keys.contracts, snap.contracts),
        (keys.specs, snap.specs),
    ]:
        have = decode_hash(pipe.hgetall(key))
        _merge(plan, key, have, wanted)
        gone = sorted(set(have) - set(wanted))
        if gone:
            plan.hdel[key] = gone
    # Memory notes may have grown in Redis: the folder adds, never removes.
    _merge(plan, keys.memory, decode_hash(pipe.hgetall(keys.memory)), snap.memory)
    # Agent state is the runtime's, and Redis's copy is the newer: a folder exported
    # before a session's last writes (a run stopped between two exports) would put an
    # older todolist back over the one the session resumes with. It only adds.
    have = decode_hash(pipe.hgetall(keys.agent_state))
    _merge(plan, keys.agent_state, have, {k: v for k, v in snap.agent_state.items()
                                          if k not in have})
    for unit, files in snap.unit_files.items():
        _plan_unit(pipe, plan, keys, unit, files)
    bugs = {k.decode(): v.decode() for k, v in pipe.hgetall(keys.bug_units).items()}
    for name, lines in snap.ledgers.items():
        entries = pipe.xrange(keys.stream(name))
        if entries and not pipe.hget(keys.ledger_index, name):
            _plan_reindex(plan, keys, name, entries, bugs)
        present = Counter(line for _id, entry in entries for line in entry_lines(entry))
        index = LedgerIndex(keys, name)
        for line in lines:
            if present[line]:
                present[line] -= 1  # already imported (or appended since): skip once
                continue
            owner, opens = entry_place(line, bugs.get)
            if opens and owner:
                bugs[opens] = owner
            plan.appends.append(index.call(line.encode("utf-8"), owner, opens))
    return plan


def _plan_reindex(plan: _Plan, keys: Keys, ledger: Ledger, entries: list[Any],
                  bugs: dict[str, str]) -> None:
    """Index a ledger written before the per-unit index existed (store/ledgerindex.py)."""
    for entry_id, fields in entries:
        line = "\n".join(entry_lines(fields))
        unit, opens = entry_place(line, bugs.get)
        if unit is None:
            continue
        if opens:
            bugs[opens] = unit
            plan.hset.setdefault(keys.bug_units, {})[opens] = unit.encode()
        stream = keys.unit_ledger(ledger, unit)
        plan.reindex.setdefault(stream, []).append((entry_id, line.encode("utf-8")))
    plan.hset.setdefault(keys.ledger_index, {})[ledger] = b"1"


def _plan_unit(pipe: Any, plan: _Plan, keys: Keys, unit: str, files: dict[str, bytes]) -> None:
    """Bring the user's edits of a unit folder into Redis, and nothing else.

    The folder may be behind Redis (commits made since the last export) or torn (an
    export killed halfway): files DevLoop may have left there (`ondisk.known`) are not
    edits, so neither case overwrites the agents' work. What the user changed, added or
    deleted is applied over Redis's files, path by path.
    """
    meta = decode_hash(pipe.hgetall(keys.meta(unit)))
    on_disk = files_digest(files)
    if on_disk == meta.get("imported", b"").decode():
        return
    current = decode_hash(pipe.hgetall(keys.files(unit)))
    changes = ondisk.user_changes(files, ondisk.decode(meta.get("known")), current)
    # From now on this is the state the folder is known to hold.
    mark = {"imported": on_disk.encode(), "known": ondisk.encode(ondisk.known_of(files))}
    if not changes:
        plan.marks[keys.meta(unit)] = mark
        return
    version = int(meta.get("version", b"0")) + 1
    plan.replace[keys.files(unit)] = ondisk.applied(current, changes)
    plan.hset[keys.meta(unit)] = {"version": str(version).encode(), **mark}
    plan.changed_units.append(unit)


def _merge(plan: _Plan, key: str, have: dict[str, bytes], wanted: dict[str, bytes]) -> None:
    """Plan an HSET of the fields of wanted that Redis lacks or holds differently."""
    differ = {k: v for k, v in wanted.items() if have.get(k) != v}
    if differ:
        plan.hset.setdefault(key, {}).update(differ)


def _apply(pipe: Pipeline, plan: _Plan) -> None:
    """Queue the planned writes inside MULTI."""
    for key, files in plan.replace.items():
        pipe.delete(key)
        if files:
            pipe.hset(key, mapping=_mapping(files))
    for key, fields in plan.hset.items():
        pipe.hset(key, mapping=_mapping(fields))
    for key, gone in plan.hdel.items():
        pipe.hdel(key, *gone)
    for key, entries in plan.reindex.items():
        pipe.delete(key)  # whatever an append indexed before the rest was: rebuilt in order
        for entry_id, line in entries:
            pipe.xadd(key, {STREAM_FIELD: line}, id=entry_id)
    append = pipe.register_script(scripts.LEDGER_APPEND)
    for script_keys, args in plan.appends:
        append(keys=script_keys, args=args, client=pipe)
    for key, mark in plan.marks.items():
        pipe.hset(key, mapping=_mapping(mark))


def _mapping(fields: dict[str, bytes]) -> Mapping[str | bytes, bytes]:
    """fields as redis-py's stubs type HSET's mapping (their key type is invariant)."""
    return cast(Mapping[str | bytes, bytes], fields)
