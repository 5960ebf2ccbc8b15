"""Export a project from Redis into the seed layout, one atomic write per changed file."""

from __future__ import annotations

import logging
import stat
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from devloop.core.artifacts import name_refusal
from devloop.core.ids import check_id
from devloop.core.models import UnitsFile
from devloop.safe.safedir import Dir, Refused, describe
from devloop.safe.safetree import Limits, TooMany, walk
from devloop.store import ondisk
from devloop.store.base import StoreBase, decode_hash
from devloop.store.filesets import UnsafePath, files_digest, safe_relpath
from devloop.store.keys import LEDGERS
from devloop.store.records import ProjectNotImported
from devloop.store.snapshot import AGENT_STATE_DIR, MEMORY_DIR
from devloop.store.streams import entry_lines
from devloop.store.synclock import folder_synced

log = logging.getLogger(__name__)
# A project's unit folder is the user's: read more of it than a view, but still bounded.
STALE_WALK = Limits(entries=100_000, depth=64, path_bytes=4096)
STALE_READ_CAP = 64 * 1024 * 1024


@dataclass(frozen=True)
class _UnitSnapshot:
    """One unit's files as the export read them, and what the folder was known to hold."""

    files: dict[str, bytes]
    known: ondisk.Known
    stored: tuple[bytes | None, bytes | None]  # the meta's `known` and `imported` as read


class ExportMixin(StoreBase):
    """`export`: unit files, ledgers, agent state and memory notes back onto disk."""

    def export(
        self, pid: str, dest: Path, *, as_source: bool = False,
        units: Collection[str] | None = None,
    ) -> list[Path]:
        """Write pid's files under dest in the seed layout; returns the paths written.

        Files already identical on disk are left alone. With `as_source` dest is the
        folder the project is imported from (`devloop run` keeps it in sync): each unit
        dir is made to mirror Redis (files that agents deleted go here too; files the
        user added stay) and what the export wrote becomes what the folder is known to
        hold (`ondisk`), so the next import reads only the user's edits as changes,
        even from a folder this export left half-written when it was killed. With
        `units`, only those units' files (what a run exports as their versions move; the
        ledgers, agent state and memory notes are left to the whole export).
        """
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        # Exports into one folder take turns (a pull beside a run's sync among them), and
        # each reads Redis once it has its turn: one that read before the other wrote would
        # put older files back, which the next import would take for the user's edits.
        with folder_synced(dest, create=as_source or (dest / "units.json").is_file()):
            contents, snaps = self._export_contents(pid, units)
            if not as_source:
                return self._export_copy(dest, contents)
            return self._export_source(pid, dest, contents, snaps)

    @staticmethod
    def _export_copy(dest: Path, contents: dict[str, bytes]) -> list[Path]:
        """Write contents under dest (a copy: nothing there is deleted or marked known)."""
        with Dir.open(dest.resolve()) as root:
            # Check every target first: an unsafe path refuses the export before any write.
            for rel in contents:
                check_target(root, rel)
            return [dest.resolve() / rel for rel, data in contents.items()
                    if write_atomic(root, rel, data)]

    def _export_source(
        self, pid: str, dest: Path, contents: dict[str, bytes], units: dict[str, _UnitSnapshot]
    ) -> list[Path]:
        """Mirror Redis into the folder the project is imported from (the lock is held)."""
        with Dir.open(dest.resolve()) as root:
            for rel in contents:
                check_target(root, rel)
            stale = {unit: _stale(root, f"units/{unit}", snap) for unit, snap in units.items()}
            # Before any write: the folder may now hold either the old or the new files.
            self._mark_known(pid, units, {
                unit: (ondisk.widened(snap.known, snap.files, stale[unit]), None)
                for unit, snap in units.items()
            })
            written = [rel for rel, data in contents.items() if write_atomic(root, rel, data)]
            for unit, rels in stale.items():
                for rel in rels:
                    root.remove(f"units/{unit}/{rel}")
            self._mark_known(pid, units, {
                unit: (ondisk.known_of(snap.files), files_digest(snap.files))
                for unit, snap in units.items()
            })
        return [dest.resolve() / rel for rel in written]

    def _mark_known(
        self, pid: str, units: dict[str, _UnitSnapshot],
        marks: dict[str, tuple[ondisk.Known, str | None]],
    ) -> None:
        """Store what each unit folder may hold (and its digest, once it is exact), in
        one round trip, skipping units whose record would not change."""
        with self.client.pipeline(transaction=False) as pipe:
            for unit, (known, digest) in marks.items():
                fields = {"known": ondisk.encode(known)}
                if digest is not None:
                    fields["imported"] = digest.encode()
                if (fields["known"], fields.get("imported", units[unit].stored[1])) == \
                        units[unit].stored:
                    continue
                pipe.hset(self.keys(pid).meta(unit), mapping=fields)  # type: ignore[arg-type]
            pipe.execute()

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

    def _export_contents(
        self, pid: str, only: Collection[str] | None = None
    ) -> tuple[dict[str, bytes], dict[str, _UnitSnapshot]]:
        """Every exported file (with `only`, those units' files), path relative to the
        project root -> bytes, and each unit's files with what its folder is known to
        hold, read in one MULTI/EXEC: a consistent snapshot."""
        keys = self.keys(pid)
        if only is None:
            raw_units = self.client.hget(keys.project, "units_json")
            if raw_units is None:
                raise ProjectNotImported(f'project "{pid}" is not in Redis; import it first')
            unit_ids = [u.id for u in UnitsFile.model_validate_json(raw_units).units]
        else:
            unit_ids = list(only)
        with self.client.pipeline(transaction=True) as pipe:
            for unit in unit_ids:
                pipe.hgetall(keys.files(unit))
            for unit in unit_ids:
                pipe.hmget(keys.meta(unit), ["known", "imported"])
            if only is None:
                for name in LEDGERS:
                    pipe.xrange(keys.stream(name))
                pipe.hgetall(keys.agent_state)
                pipe.hgetall(keys.memory)
            replies = pipe.execute()
        out: dict[str, bytes] = {}
        units: dict[str, _UnitSnapshot] = {}
        n = len(unit_ids)
        for unit, files, (known, imported) in zip(
            unit_ids, replies[:n], replies[n : 2 * n], strict=True
        ):
            check_id(unit, "unit id")  # a unit id is a directory name: it must not climb out
            # An artifact stored before the rule never reaches the folder (a .git there runs
            # commands when git runs in it).
            kept = {rel: data for rel, data in decode_hash(files).items()
                    if name_refusal(rel) is None}
            units[unit] = _UnitSnapshot(kept, ondisk.decode(known), (known, imported))
            for rel, data in units[unit].files.items():
                out[f"units/{unit}/{safe_relpath(rel)}"] = data
        if only is not None:
            return out, units
        ledgers = replies[2 * n : 2 * n + len(LEDGERS)]
        for name, entries in zip(LEDGERS, ledgers, strict=True):
            lines = [line for _id, fields in entries for line in entry_lines(fields)]
            if lines:
                out[f"{name}.ndjson"] = ("\n".join(lines) + "\n").encode("utf-8")
        for base, files in [(AGENT_STATE_DIR, replies[-2]), (MEMORY_DIR, replies[-1])]:
            for rel, data in decode_hash(files).items():
                out[f"{base}/{safe_relpath(rel)}"] = data
        return out, units


def _stale(root: Dir, unit_dir: str, snap: _UnitSnapshot) -> list[str]:
    """The regular files under unit_dir to delete: ones DevLoop left there that Redis no
    longer has (an agent deleted them), and temporary files a killed writer left. The
    user's own files, and what an import would not read (links, special files), stay."""
    try:
        found = [
            e.rel
            for e in walk(root, unit_dir, STALE_WALK)
            if e.kind == "file" and e.problem is None and e.rel not in snap.files
        ]
    except FileNotFoundError:
        return []
    except TooMany:
        log.warning("%s/%s holds too many files to tidy; deleted files stay", root.name, unit_dir)
        return []
    stale = []
    for rel in found:
        if ondisk.TEMP_NAME.fullmatch(rel.rsplit("/", 1)[-1]):
            stale.append(rel)
            continue
        try:
            data = root.read_bytes(f"{unit_dir}/{rel}", cap=STALE_READ_CAP)
        except (OSError, Refused):
            continue  # unreadable, or larger than any file DevLoop writes: not DevLoop's
        if ondisk.is_devloops(rel, data, snap.known):
            stale.append(rel)
    return stale


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
