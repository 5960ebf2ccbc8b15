"""Export a project from Redis into the seed layout, one atomic write per changed file."""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from pathlib import Path

from devloop.ids import check_id
from devloop.models import UnitsFile
from devloop.safedir import Dir, Refused, describe
from devloop.safetree import Limits, TooMany, walk
from devloop.store.base import StoreBase, decode_hash
from devloop.store.filesets import UnsafePath, files_digest, safe_relpath
from devloop.store.keys import LEDGERS
from devloop.store.records import ProjectNotImported
from devloop.store.snapshot import AGENT_STATE_DIR, MEMORY_DIR
from devloop.store.streams import entry_lines

log = logging.getLogger(__name__)
# A project's unit folder is the user's: read more of it than a view, but still bounded.
STALE_WALK = Limits(entries=100_000, depth=64, path_bytes=4096)

# KEYS: meta.  ARGV: version the export read, digest of the files it wrote.  The digest
# becomes the unit's `imported` one only if no commit came in between.
MARK_IMPORTED = """
if tonumber(redis.call('HGET', KEYS[1], 'version') or '0') ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'imported', ARGV[2])
return 1
"""


@dataclass(frozen=True)
class _UnitSnapshot:
    """One unit's files as the export read them, and their version."""

    version: int
    files: dict[str, bytes]


class ExportMixin(StoreBase):
    """`export`: unit files, ledgers, agent state and memory notes back onto disk."""

    def export(self, pid: str, dest: Path, *, as_source: bool = False) -> list[Path]:
        """Write pid's files under dest in the seed layout; returns the paths written.

        Files already identical on disk are left alone. With `as_source` dest is the
        folder the project is imported from (`devloop run` keeps it in sync): each unit
        dir is made to mirror Redis (files deleted there are deleted here) and the
        written files become the unit's `imported` state, so the next import of the
        folder reads it as unchanged instead of replacing commits made since with it.
        """
        dest = Path(dest)
        contents, units = self._export_contents(pid)
        dest.mkdir(parents=True, exist_ok=True)
        with Dir.open(dest.resolve()) as root:
            # Check every target first: an unsafe path refuses the export before any write.
            for rel in contents:
                check_target(root, rel)
            written = [rel for rel, data in contents.items() if write_atomic(root, rel, data)]
            if as_source:
                for unit, snap in units.items():
                    _remove_stale(root, f"units/{unit}", set(snap.files))
                    self.client.eval(
                        MARK_IMPORTED, 1, self.keys(pid).meta(unit), snap.version,
                        files_digest(snap.files),
                    )
        return [dest.resolve() / rel for rel in written]

    def export_definition(self, pid: str, dest: Path) -> list[Path]:
        """Write the project's definition (units.json, SDD sections, spec.json files,
        conventions.md) where dest lacks it, so a folder pulled from Redis alone loads,
        reports and runs; a definition already there is the user's and stays."""
        files = self.definition_files(pid)  # type: ignore[attr-defined]
        dest.mkdir(parents=True, exist_ok=True)
        written = []
        with Dir.open(dest.resolve()) as root:
            for rel in files:
                check_target(root, rel)
            if root.exists("units.json"):
                return []  # a project folder already: its own definition rules
            for rel, data in files.items():
                if write_atomic(root, rel, data):
                    written.append(dest.resolve() / rel)
        return written

    def _export_contents(self, pid: str) -> tuple[dict[str, bytes], dict[str, _UnitSnapshot]]:
        """Every exported file, path relative to the project root -> bytes, and each
        unit's files with their version, read in one MULTI/EXEC: a consistent snapshot."""
        keys = self.keys(pid)
        raw_units = self.client.hget(keys.project, "units_json")
        if raw_units is None:
            raise ProjectNotImported(f'project "{pid}" is not in Redis; import it first')
        unit_ids = [u.id for u in UnitsFile.model_validate_json(raw_units).units]
        with self.client.pipeline(transaction=True) as pipe:
            for unit in unit_ids:
                pipe.hgetall(keys.files(unit))
            for unit in unit_ids:
                pipe.hget(keys.meta(unit), "version")
            for name in LEDGERS:
                pipe.xrange(keys.stream(name))
            pipe.hgetall(keys.agent_state)
            pipe.hgetall(keys.memory)
            replies = pipe.execute()
        out: dict[str, bytes] = {}
        units: dict[str, _UnitSnapshot] = {}
        n = len(unit_ids)
        for unit, files, version in zip(unit_ids, replies[:n], replies[n : 2 * n], strict=True):
            check_id(unit, "unit id")  # a unit id is a directory name: it must not climb out
            units[unit] = _UnitSnapshot(int(version or 0), decode_hash(files))
            for rel, data in units[unit].files.items():
                out[f"units/{unit}/{safe_relpath(rel)}"] = data
        ledgers = replies[2 * n : 2 * n + len(LEDGERS)]
        for name, entries in zip(LEDGERS, ledgers, strict=True):
            lines = [line for _id, fields in entries for line in entry_lines(fields)]
            if lines:
                out[f"{name}.ndjson"] = ("\n".join(lines) + "\n").encode("utf-8")
        for base, files in [(AGENT_STATE_DIR, replies[-2]), (MEMORY_DIR, replies[-1])]:
            for rel, data in decode_hash(files).items():
                out[f"{base}/{safe_relpath(rel)}"] = data
        return out, units


def _remove_stale(root: Dir, unit_dir: str, keep: set[str]) -> None:
    """Delete the regular files under unit_dir that Redis no longer has (an agent deleted
    them); what an import would not read (links, special files) is left alone."""
    try:
        stale = [
            e.rel
            for e in walk(root, unit_dir, STALE_WALK)
            if e.kind == "file" and e.problem is None and e.rel not in keep
        ]
    except FileNotFoundError:
        return
    except TooMany:
        log.warning("%s/%s holds too many files to tidy; deleted files stay", root.name, unit_dir)
        return
    for rel in stale:
        root.remove(f"{unit_dir}/{rel}")


def check_target(root: Dir, rel: str) -> None:
    """UnsafePath unless rel is missing or a regular file reached without any link."""
    safe_relpath(rel)
    try:
        st = root.lstat(rel)
    except Refused as exc:
        raise UnsafePath(f"{rel!r} {exc.reason} in {root.name}: export writes nothing "
                         "through a link; remove the link") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{rel!r} is {describe(st.st_mode)} in {root.name}: export "
                         "replaces only regular files; remove it")


def write_atomic(root: Dir, rel: str, data: bytes) -> bool:
    """Replace root/rel with data via a synced temp file; False when it already held data."""
    st = root.lstat(rel)
    if st is not None and st.st_size == len(data):
        try:
            if root.read_bytes(rel, cap=len(data)) == data:
                return False
        except OSError:
            pass  # unreadable: rewrite it
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o644
    root.write_atomic(rel, data, mode, durable=True)
    return True
