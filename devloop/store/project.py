"""The project record as sessions read it: registry, SDD section, spec, contract, notes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from devloop.core import dag
from devloop.core.ids import check_id
from devloop.core.models import Stack, UnitsFile, UnitSpec
from devloop.store.base import StoreBase, decode_hash, text
from devloop.store.fence import Fence, fenced_call
from devloop.store.filesets import safe_relpath
from devloop.store.keys import company_memory
from devloop.store.records import ProjectNotImported
from devloop.store.snapshot import PROJECT_VERSION, record_version

T = TypeVar("T")
RECORDS_CACHED = 8  # project versions whose parsed record a store keeps


@dataclass(frozen=True)
class ProjectRecord:
    """units.json, stack, company id and conventions of an imported project.

    A record is shared by every reader of the same version in a process (the store keeps
    it): read it, never change it.
    """

    units: UnitsFile
    units_text: str  # units.json as a view holds it (Record.to_json_text)
    company_id: str
    stack: Stack
    conventions: str
    version: bytes = b""  # the project hash's version field (b"": imported without one)

    @cached_property
    def graph(self) -> dict[str, list[str]]:
        """Unit id -> ids it depends on (built once per record)."""
        return {u.id: list(u.depends_on) for u in self.units.units}

    @cached_property
    def dependents(self) -> dict[str, list[str]]:
        """Unit id -> the units that depend on it (dag.dependents, built once per record)."""
        return dag.dependents(self.graph)


class ProjectMixin(StoreBase):
    """Read the imported project; add memory notes and agent state; delete a project."""

    def has_project(self, pid: str) -> bool:
        """Whether pid was imported."""
        return bool(self.client.exists(self.keys(pid).project))

    def project_record(self, pid: str) -> ProjectRecord:
        """The project record; ProjectNotImported when pid is not in Redis.

        One HGET of the version when this store read that version before (a worker reads
        the record several times a step; units.json is 1 MB at 10,000 units).
        """
        key = self.keys(pid).project
        cached = self.cached_record(pid, self.client.hget(key, PROJECT_VERSION))
        return cached or self.record_from(pid, decode_hash(self.client.hgetall(key)))

    def cached_record(self, pid: str, version: bytes | None) -> ProjectRecord | None:
        """The record of that version of pid this store parsed before, or None."""
        return self._records.get((pid, version)) if version else None

    def record_from(self, pid: str, raw: dict[str, bytes]) -> ProjectRecord:
        """The project record from its hash's fields (kept per version for later reads)."""
        if "units_json" not in raw:
            raise ProjectNotImported(f'project "{pid}" is not in Redis; import it first')
        version = raw.get(PROJECT_VERSION) or record_version(raw)
        cached = self._records.get((pid, version))
        if cached is not None:
            return cached
        units = UnitsFile.model_validate_json(raw["units_json"])
        record = ProjectRecord(
            units=units,
            units_text=units.to_json_text(),
            company_id=raw.get("company_id", b"").decode("utf-8"),
            stack=units.stack,
            conventions=raw.get("conventions", b"").decode("utf-8"),
            version=version,
        )
        if len(self._records) >= RECORDS_CACHED:
            del self._records[next(iter(self._records))]  # the oldest read
        self._records[(pid, version)] = record
        return record

    def sdd_document(self, pid: str, unit: str) -> str | None:
        """The standalone HTML of the unit's SDD section."""
        return text(self.client.hget(self.keys(pid).sdd, unit))

    def unit_spec(self, pid: str, unit: str) -> UnitSpec | None:
        """The unit's spec.json (derived from the SDD when the folder had none)."""
        raw = self.client.hget(self.keys(pid).specs, unit)
        return UnitSpec.model_validate_json(raw) if raw else None

    def put_unit_spec(self, pid: str, unit: str, spec: UnitSpec) -> None:
        """Replace the unit's spec record (a person's edit, after its commit landed)."""
        self.client.hset(self.keys(pid).specs, unit, spec.model_dump_json())

    def sdd_contract(self, pid: str, unit: str) -> dict[str, Any] | None:
        """The unit's contract as the SDD declares it."""
        raw = self.client.hget(self.keys(pid).contracts, unit)
        return json.loads(raw) if raw else None

    def definition_files(self, pid: str) -> dict[str, bytes]:
        """What the project is defined by, in the seed layout: units.json, one SDD file per
        unit's section, each spec.json, conventions.md (for a folder made from Redis alone)."""
        record = self.project_record(pid)
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.sdd)
            pipe.hgetall(keys.specs)
            sdd, specs = pipe.execute()
        out = {"units.json": record.units_text.encode()}
        for unit, doc in sdd.items():
            out[f"sdd/mvcp/{check_id(unit.decode(), 'unit id')}.html"] = doc
        for unit, spec in specs.items():
            out[f"units/{check_id(unit.decode(), 'unit id')}/spec.json"] = spec
        if record.conventions:
            out["conventions.md"] = record.conventions.encode()
        return out

    def sdd_contracts(self, pid: str) -> dict[str, dict[str, Any]]:
        """Every unit's contract as the SDD declares it (units without one left out)."""
        raw = self.client.hgetall(self.keys(pid).contracts)
        return {k.decode(): json.loads(v) for k, v in raw.items()}

    def memory_notes(self, pid: str, role: str) -> dict[str, str]:
        """A role's notes for every unit (memory/devloop/{role}/*): file name -> text.

        Notes a unit's sessions wrote are not among them until that unit passes.
        """
        raw = decode_hash(self.client.hgetall(self.keys(pid).memory))
        return _notes_under(raw, f"{role}/")

    def pending_notes(self, pid: str, role: str, unit: str) -> dict[str, str]:
        """Notes the role's sessions of unit wrote that wait for unit to pass."""
        raw = decode_hash(self.client.hgetall(self.keys(pid).memory))
        return _notes_under(raw, pending_prefix(role, unit))

    def put_memory_note(self, pid: str, role: str, name: str, note: str) -> None:
        """Write memory/devloop/{role}/{name}: a note every unit's sessions see."""
        path = safe_relpath(f"{role}/{name}").as_posix()
        self.client.hset(self.keys(pid).memory, path, note.encode("utf-8"))

    def put_pending_note(
        self, pid: str, role: str, unit: str, name: str, note: str, fence: Fence | None = None
    ) -> None:
        """Write a note a session of unit recorded: other units see it once unit passes."""
        path = safe_relpath(f"{pending_prefix(role, unit)}{name}.md").as_posix()
        self._hset(self.keys(pid).memory, path, note.encode("utf-8"), fence)

    def _hset(self, key: str, field: str, value: bytes, fence: Fence | None) -> None:
        """HSET, fenced by a step's lease when one is given."""
        if fence is not None:
            fenced_call(self.client, fence, [key], "HSET", key, field, value)
        else:
            self.client.hset(key, field, value)

    def company_notes(self, company_id: str, role: str) -> dict[str, str]:
        """A role's notes promoted by every project of the company: name -> text."""
        if not company_id:
            return {}
        raw = decode_hash(self.client.hgetall(company_memory(company_id)))
        return _notes_under(raw, f"{role}/")

    def promote_notes(self, pid: str, unit: str) -> list[str]:
        """Move unit's pending notes (every role) to the project's notes, naming their
        author unit, and copy them to the company's memory, naming project and unit;
        returns the promoted paths. Running it again promotes nothing."""
        key = self.keys(pid).memory
        raw = decode_hash(self.client.hgetall(key))
        company = (self.client.hget(self.keys(pid).project, "company_id") or b"").decode()
        moves: dict[str, bytes] = {}
        for path, data in raw.items():
            role, sep, rest = path.partition(f"/{PENDING}/{check_id(unit, 'unit id')}/")
            if sep and "/" not in role and "/" not in rest and rest:
                moves[path] = data
        if not moves:
            return []
        promoted: dict[str | bytes, bytes] = {
            _promoted_path(path, unit): _with_author(data, unit) for path, data in moves.items()
        }
        shared: dict[str | bytes, bytes] = {
            _promoted_path(path, unit).replace("/", f"/{pid}--", 1): _with_author(
                data, unit, pid
            )
            for path, data in moves.items()
        }
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=promoted)
            pipe.hdel(key, *moves)
            if company:
                pipe.hset(company_memory(company), mapping=shared)
            pipe.execute()
        return sorted(str(path) for path in promoted)

    def agent_state(self, pid: str) -> dict[str, bytes]:
        """Every agent-state/ file: path relative to agent-state/ -> bytes."""
        return decode_hash(self.client.hgetall(self.keys(pid).agent_state))

    def agent_state_file(self, pid: str, path: str) -> bytes | None:
        """One agent-state/ file (a session's todolist), without reading the others."""
        data: bytes | None = self.client.hget(self.keys(pid).agent_state, path)
        return data

    def put_agent_state(
        self, pid: str, path: str, data: bytes, fence: Fence | None = None
    ) -> None:
        """Write agent-state/{path}."""
        self._hset(self.keys(pid).agent_state, safe_relpath(path).as_posix(), data, fence)

    def delete_project(self, pid: str) -> int:
        """Remove every key of pid; returns how many were removed."""
        removed = 0
        for batch in _batches(self.client.scan_iter(match=self.keys(pid).pattern, count=500)):
            removed += int(self.client.unlink(*batch))
        return removed


PENDING = "pending"


def promote_memory(store: ProjectMixin, pid: str, unit: str) -> list[str]:
    """Called by the loop when unit passes: its sessions' notes become the project's."""
    return store.promote_notes(pid, unit)


def pending_prefix(role: str, unit: str) -> str:
    """`{role}/pending/{unit}/`: where a unit's unpromoted notes live in memory/devloop/."""
    return f"{role}/{PENDING}/{check_id(unit, 'unit id')}/"


def _notes_under(raw: dict[str, bytes], prefix: str) -> dict[str, str]:
    """Notes directly under prefix (not in its subfolders): name -> text."""
    return {
        k.removeprefix(prefix): v.decode("utf-8", errors="replace")
        for k, v in sorted(raw.items())
        if k.startswith(prefix) and "/" not in k.removeprefix(prefix)
    }


def _promoted_path(path: str, unit: str) -> str:
    """`{role}/pending/{unit}/{name}` -> `{role}/{unit}--{name}`: one file per author."""
    role, _, name = path.partition(f"/{PENDING}/{unit}/")
    return f"{role}/{unit}--{name}"


def _with_author(note: bytes, unit: str, project: str | None = None) -> bytes:
    """The note with `author_unit: {unit}` (and `author_project`) in its front matter
    (added when it has none)."""
    text = note.decode("utf-8", errors="replace")
    head = f"author_unit: {unit}\n" + (f"author_project: {project}\n" if project else "")
    if text.startswith("---\n") and "\n---" in text[3:]:
        return f"---\n{head}{text[4:]}".encode()
    return f"---\n{head}---\n{text}".encode()


def _batches(items: Iterable[T], size: int = 500) -> Iterator[list[T]]:
    """Lists of up to size items from an iterable."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
