"""A unit's passed code: what its dependents' runs import, kept apart from its live files.

When a unit passes, its code/** and contract.json are copied aside; while it runs again
(a re-run, a respec), its dependents keep importing the code that passed, never a
half-made attempt. A unit that passed before this record existed (an older folder)
lends its current files, which are the ones that passed.
"""

from __future__ import annotations

from devloop.store.base import StoreBase, decode_hash
from devloop.store.filesets import files_digest
from devloop.store.records import UnitState

CONTRACT = "contract.json"


def passed_part(path: str) -> bool:
    """Whether a unit file is part of what it passed with (what others import or read)."""
    return path.startswith("code/") or path == CONTRACT


class PassedMixin(StoreBase):
    """`keep_passed` and `passed_code`."""

    def keep_passed(self, pid: str, unit: str) -> tuple[str | None, str]:
        """Copy the unit's code/** and contract.json aside as its passed code; the digests
        of what was kept before (None: nothing) and of what is kept now."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hgetall(keys.passed(unit))
            pipe.hgetall(keys.files(unit))
            before, files = pipe.execute()
        kept = {p: b for p, b in decode_hash(files).items() if passed_part(p)}
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(keys.passed(unit))
            if kept:
                pipe.hset(keys.passed(unit), mapping=kept)  # type: ignore[arg-type]
            pipe.execute()
        old = files_digest(decode_hash(before)) if before else None
        return old, files_digest(kept)

    def passed_code(self, pid: str, units: list[str]) -> dict[str, dict[str, bytes]]:
        """Each listed unit's passed code (code/** and contract.json), for those that have
        passed; a passed unit with no copy kept lends its current files."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            for unit in units:
                pipe.hgetall(keys.passed(unit))
                pipe.get(keys.state(unit))
            replies = pipe.execute()
        out: dict[str, dict[str, bytes]] = {}
        lend = []
        for unit, kept, state in zip(units, replies[::2], replies[1::2], strict=True):
            if kept:
                out[unit] = decode_hash(kept)
            elif state and UnitState.model_validate_json(state).status == "passed":
                lend.append(unit)
        if lend:  # only these need their whole file hash read
            with self.client.pipeline(transaction=False) as pipe:
                for unit in lend:
                    pipe.hgetall(keys.files(unit))
                for unit, files in zip(lend, pipe.execute(), strict=True):
                    out[unit] = {p: b for p, b in decode_hash(files).items() if passed_part(p)}
        return out
