"""Export a project from Redis into the seed layout, one atomic write per changed file."""

from __future__ import annotations

import stat
from pathlib import Path

from devloop.ids import check_id
from devloop.models import UnitsFile
from devloop.safedir import Dir, Refused, describe
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
        contents = self._export_contents(pid)
        dest.mkdir(parents=True, exist_ok=True)
        with Dir.open(dest.resolve()) as root:
            # Check every target first: an unsafe path refuses the export before any write.
            for rel in contents:
                check_target(root, rel)
            written = [rel for rel, data in contents.items() if write_atomic(root, rel, data)]
        return [dest.resolve() / rel for rel in written]

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
