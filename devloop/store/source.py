"""What a session's view and prompt read about one unit, fetched in two round trips."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from devloop.core.models import UnitSpec
from devloop.store.base import decode_hash, text
from devloop.store.project import ProjectMixin, ProjectRecord
from devloop.store.records import UnitFiles
from devloop.store.snapshot import PROJECT_VERSION


@dataclass(frozen=True)
class UnitSource:
    """One unit as Redis holds it at one moment, with the project around it."""

    record: ProjectRecord
    spec: UnitSpec | None
    sdd_section: str | None  # the standalone HTML of its SDD section
    sdd_contract: dict[str, Any] | None  # its contract as the SDD declares it
    files: UnitFiles
    upstream: dict[str, bytes]  # dependency -> its contract.json (those that have one)
    checkpoint: dict[str, Any] | None  # the role's session checkpoint (None: no role asked)


class SourceMixin(ProjectMixin):
    """`unit_source`: the reads of a session's start, batched (each one is a round trip)."""

    def unit_source(self, pid: str, unit: str, role: str | None = None) -> UnitSource:
        """The unit, its project record and (with role) that role's checkpoint.

        KeyError when the project has no such unit; ProjectNotImported without the project.
        """
        keys = self.keys(pid)
        record: ProjectRecord | None = None
        for whole in (False, True):  # the record's version first; all of it if not cached
            with self.client.pipeline(transaction=True) as pipe:  # one consistent snapshot
                if whole:
                    pipe.hgetall(keys.project)
                else:
                    pipe.hget(keys.project, PROJECT_VERSION)
                pipe.hget(keys.specs, unit)
                pipe.hget(keys.sdd, unit)
                pipe.hget(keys.contracts, unit)
                pipe.hget(keys.meta(unit), "version")
                pipe.hgetall(keys.files(unit))
                if role:
                    pipe.get(keys.session(role, unit))
                replies = pipe.execute()
            project = replies[0]
            record = (self.record_from(pid, decode_hash(project)) if whole
                      else self.cached_record(pid, project))
            if record is not None:
                break
        assert record is not None  # the second pass reads the whole record, or raises
        spec, sdd, contract, version, files = replies[1:6]
        checkpoint = replies[6] if role else None
        entry = record.units.unit(unit)
        if entry is None:
            raise KeyError(f'unit "{unit}" is not in project "{pid}"')
        with self.client.pipeline(transaction=False) as pipe:
            for dep in entry.depends_on:
                pipe.hget(keys.files(dep), "contract.json")
            contracts = pipe.execute() if entry.depends_on else []
        return UnitSource(
            record=record,
            spec=UnitSpec.model_validate_json(spec) if spec else None,
            sdd_section=text(sdd),
            sdd_contract=json.loads(contract) if contract else None,
            files=UnitFiles(version=int(version or 0), files=decode_hash(files)),
            upstream={d: c for d, c in zip(entry.depends_on, contracts, strict=True) if c},
            checkpoint=json.loads(checkpoint) if checkpoint else None,
        )
