"""Export a project from Redis into the seed layout, one atomic write per changed file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from devloop.models import UnitsFile
from devloop.store.base import StoreBase, decode_hash
from devloop.store.filesets import UnsafePath, files_digest, safe_relpath
from devloop.store.keys import LEDGERS
from devloop.store.records import ProjectNotImported
from devloop.store.snapshot import AGENT_STATE_DIR, MEMORY_DIR, walk_files
from devloop.store.streams import entry_lines

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
        # Resolve every target first: an unsafe path refuses the export before any write.
        targets = [(inside(dest, rel), data) for rel, data in contents.items()]
        written = [path for path, data in targets if write_atomic(path, data)]
        if as_source:
            for unit, snap in units.items():
                _remove_stale(inside(dest, f"units/{unit}"), set(snap.files))
                self.client.eval(
                    MARK_IMPORTED, 1, self.keys(pid).meta(unit), snap.version,
                    files_digest(snap.files),
                )
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
            safe_relpath(unit)  # a unit id is a directory name: it must not climb out
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


def _remove_stale(unit_dir: Path, keep: set[str]) -> None:
    """Delete the regular files under unit_dir that Redis no longer has (an agent deleted
    them); what an import would not read (links, special files) is left alone."""
    for rel, path in walk_files(unit_dir).items():
        if rel not in keep:
            path.unlink()


def inside(dest: Path, rel: str) -> Path:
    """dest/rel, refusing a path that would resolve outside dest (`..`, symlinks)."""
    root = dest.resolve()
    path = root / safe_relpath(rel)
    parent = path.parent.resolve()
    if parent != root and root not in parent.parents:
        raise UnsafePath(f"{rel!r} resolves outside {root} (through a symlink)")
    return parent / path.name


def write_atomic(path: Path, data: bytes) -> bool:
    """Replace path with data via a synced temp file; False when it already held data."""
    try:
        if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except OSError:
        pass  # unreadable: rewrite it
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.is_file() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return True


def _fsync_dir(path: Path) -> None:
    """Make a rename durable by syncing its directory (best effort)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
