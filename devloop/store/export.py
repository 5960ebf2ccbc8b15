"""Export a project from Redis into the seed layout, one atomic write per changed file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from devloop.ids import check_id
from devloop.models import UnitsFile
from devloop.store.base import StoreBase, decode_hash
from devloop.store.filesets import UnsafePath, safe_relpath
from devloop.store.keys import LEDGERS
from devloop.store.records import ProjectNotImported
from devloop.store.snapshot import AGENT_STATE_DIR, MEMORY_DIR
from devloop.store.streams import entry_lines


class ExportMixin(StoreBase):
    """`export`: unit files, ledgers, agent state and memory notes back onto disk."""

    def export(self, pid: str, dest: Path) -> list[Path]:
        """Write pid's files under dest in the seed layout; returns the paths written.

        Files already identical on disk are left alone, and files deleted in Redis are
        not removed from disk.
        """
        dest = Path(dest)
        # Resolve every target first: an unsafe path refuses the export before any write.
        targets = [(inside(dest, rel), data) for rel, data in self._export_contents(pid).items()]
        return [path for path, data in targets if write_atomic(path, data)]

    def _export_contents(self, pid: str) -> dict[str, bytes]:
        """Every exported file, path relative to the project root -> bytes, read in one
        MULTI/EXEC so the export is a consistent snapshot."""
        keys = self.keys(pid)
        raw_units = self.client.hget(keys.project, "units_json")
        if raw_units is None:
            raise ProjectNotImported(f'project "{pid}" is not in Redis; import it first')
        unit_ids = [u.id for u in UnitsFile.model_validate_json(raw_units).units]
        with self.client.pipeline(transaction=True) as pipe:
            for unit in unit_ids:
                pipe.hgetall(keys.files(unit))
            for name in LEDGERS:
                pipe.xrange(keys.stream(name))
            pipe.hgetall(keys.agent_state)
            pipe.hgetall(keys.memory)
            replies = pipe.execute()
        out: dict[str, bytes] = {}
        n = len(unit_ids)
        for unit, files in zip(unit_ids, replies[:n], strict=True):
            check_id(unit, "unit id")  # a unit id is a directory name: it must not climb out
            for rel, data in decode_hash(files).items():
                out[f"units/{unit}/{safe_relpath(rel)}"] = data
        for name, entries in zip(LEDGERS, replies[n : n + len(LEDGERS)], strict=True):
            lines = [line for _id, fields in entries for line in entry_lines(fields)]
            if lines:
                out[f"{name}.ndjson"] = ("\n".join(lines) + "\n").encode("utf-8")
        for base, files in [(AGENT_STATE_DIR, replies[-2]), (MEMORY_DIR, replies[-1])]:
            for rel, data in decode_hash(files).items():
                out[f"{base}/{safe_relpath(rel)}"] = data
        return out


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
