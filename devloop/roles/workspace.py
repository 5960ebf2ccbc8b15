"""A session's least-privilege view of one unit: materialize it, collect changes, commit them.

The view holds only what the role may read (its unit, its own SDD section, upstream
contract.json files, units.json); what it may write is the role's write set. Changes
outside the write set are never committed: they come back as violations.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import posixpath
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from devloop.core.artifacts import content_refusal, name_refusal, refused_dir
from devloop.core.config import Settings
from devloop.core.ids import check_id, id_dir
from devloop.core.writeset import allowed, owned_files, writable_roots, write_set
from devloop.safe.owned import Found, OwnedFiles
from devloop.safe.safedir import Dir, Refused
from devloop.safe.safetree import Entry, Limits, TooMany, printable, walk
from devloop.sandbox.viewdir import make_view, remove_view
from devloop.store import Fence, RedisStore, UnitSource

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Violation:
    """A change the role was not allowed to make, and why it was refused."""

    path: str
    reason: str
    owner: str | None = None  # the tool that owns the file, for a change to its record
    artifact: bool = False  # refused as not source (devloop/core/artifacts.py), wherever it is

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass
class Changes:
    """What a session changed in its view: accepted file contents and refused paths."""

    files: dict[str, bytes | None] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)


@dataclass
class CommitOutcome:
    """The result of committing a session's changes to the store."""

    applied: bool
    version: int
    committed: list[str]
    violations: list[Violation]
    reason: str | None = None


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Workspace:
    """The materialized view of (role, unit, attempt) in a fresh scratch dir.

    Every access to the view goes through `files`, a handle that follows no link and
    reads no fifo; what a session may leave there is bounded by the unit limits
    (DEVLOOP_UNIT_MAX_FILES, _MAX_DEPTH, _MAX_PATH_BYTES): past them, a violation.
    """

    def __init__(
        self,
        store: RedisStore,
        pid: str,
        unit: str,
        role: str,
        attempt: int,
        *,
        settings: Settings,
        run_id: str | None = None,
        try_no: int = 1,
        fence: Fence | None = None,
    ) -> None:
        self.store, self.pid, self.unit, self.role, self.attempt = store, pid, unit, role, attempt
        self.fence = fence  # the step's lease: its commit lands only while it holds it
        check_id(unit, "unit id")  # it names the view dir and units/{unit} inside it
        self.run_id = run_id
        # A tester's second try in the same attempt commits once more, under its own name.
        self.committer = role if try_no == 1 else f"{role}.{try_no}"
        self.patterns = write_set(role, run_id)
        self.settings = settings
        self.file_cap_bytes = settings.file_cap_bytes
        self.limits = Limits(
            settings.unit_max_files, settings.unit_max_depth, settings.unit_max_path_bytes
        )
        self.root: Path | None = None
        self._dir: Dir | None = None
        self.base_version = 0
        self.materialized: dict[str, str] = {}
        self._base: dict[str, bytes] = {}  # the unit's files as materialized (revert_to)
        # What each tool-owned file holds as its tool last wrote it (the tools record here).
        self.owned = OwnedFiles(owned_files(role, run_id))
        # What else the session laid out on the host (its upstream tree), removed with it.
        self._also: list[Callable[[], None]] = []

    @property
    def unit_rel(self) -> str:
        """The unit dir relative to the view root: the cwd of every tool."""
        return f"units/{self.unit}"

    @property
    def unit_dir(self) -> Path:
        """The unit dir on the host (for the sandbox's binds; host code uses `files`)."""
        assert self.root is not None, "materialize() first"
        return self.root / self.unit_rel

    @property
    def files(self) -> Dir:
        """The handle on the view: the only way host code reaches its files."""
        assert self._dir is not None, "materialize() first"
        return self._dir

    def writable(self) -> list[str]:
        """View-relative paths to bind writable in the sandbox."""
        return [f"{self.unit_rel}/{p}" for p in writable_roots(self.patterns)]

    def materialize(self, source: UnitSource | None = None) -> Path:
        """Write the role's view into a fresh scratch dir and return its root.

        `source` is the unit as read from Redis when the caller has read it already.
        """
        source = source or self.store.unit_source(self.pid, self.unit)
        # Under the cache dir, not a 0700 temp dir: the sandbox uid must reach the view.
        self.root = make_view(self.settings, prefix=f"{self.role}-{self.unit}-")
        self._dir = Dir.open(self.root)
        self._write("units.json", source.record.units_text)
        self._write(f"sdd/mvcp/{self.unit}.html", source.sdd_section or "")
        for dep, contract in source.upstream.items():
            self._write(f"{id_dir(Path('units'), dep)}/contract.json", contract)
        files = source.files
        self.base_version = files.version
        self._base = files.files
        self.owned.start(files.files)
        for rel, data in files.files.items():
            if name_refusal(rel) is None:  # stored before the rule: never laid out to run
                self._write(f"{self.unit_rel}/{rel}", data, track=True)
        self.files.mkdirs(self.unit_rel)
        return self.root

    def _write(self, rel: str, data: bytes | str, track: bool = False) -> None:
        """Write one file of the view, world-readable, remembering unit files' digests."""
        blob = data.encode() if isinstance(data, str) else data
        self.files.write_atomic(rel, blob, 0o644)
        if track:
            self.materialized[rel.removeprefix(self.unit_rel + "/")] = _digest(blob)

    def _entries(self, changes: Changes) -> list[Entry] | None:
        """The unit dir's entries, or None (and a violation) past the file cap."""
        try:
            return list(walk(self.files, self.unit_rel, self.limits))
        except TooMany:
            changes.violations.append(
                Violation(
                    self.unit_rel,
                    f"holds more than {self.limits.entries} files and directories "
                    "(DEVLOOP_UNIT_MAX_FILES): nothing of it was read or committed",
                )
            )
            return None

    def collect(self) -> Changes:
        """Diff the unit dir against what was materialized, judging each change."""
        changes = Changes()
        entries = self._entries(changes)
        if entries is None:
            return changes
        seen: set[str] = set()
        unread: list[str] = []
        budget = self.file_cap_bytes
        for entry in entries:
            path = f"{self.unit_rel}/{entry.rel}"
            if any(entry.rel.startswith(prefix) for prefix in unread):
                continue  # beneath a refused dir: reported once, with the dir
            if self._owned_entry(entry.rel, entry.kind, changes):
                continue
            if entry.problem is not None:
                changes.violations.append(Violation(path, entry.problem))
                unread.append(entry.rel + "/")
                continue
            if entry.kind == "dir" and refused_dir(entry.rel):
                # Refused whole and never read: a .git or __pycache__, whatever it holds.
                what = name_refusal(entry.rel) or ""
                changes.violations.append(Violation(
                    path + "/", f"{what}: nothing under it is read or committed; delete it",
                    artifact=True))
                unread.append(entry.rel + "/")
                continue
            if entry.kind != "dir" and (named := name_refusal(entry.rel)) is not None:
                changes.violations.append(
                    Violation(path, f"{named}: not committed; delete it", artifact=True))
                continue
            if entry.kind == "dir":
                continue
            seen.add(entry.rel)
            refusal = self._refusal(entry, budget)
            if refusal is None:
                try:
                    data = self.files.read_bytes(path, cap=self.file_cap_bytes)
                except OSError as exc:
                    why = exc.reason if isinstance(exc, Refused) else exc.strerror
                    changes.violations.append(Violation(path, f"cannot be read ({why})"))
                    continue
                budget -= len(data)
                if not data and entry.rel not in self.materialized:
                    continue  # an empty placeholder the sandbox created to bind: not a write
                if self.materialized.get(entry.rel) == _digest(data):
                    continue
                if (unfit := content_refusal(entry.rel, data)) is not None:
                    changes.violations.append(
                        Violation(path, f"{unfit}; not committed", artifact=True))
                    continue
                if allowed(entry.rel, self.patterns):
                    changes.files[entry.rel] = data
                    continue
                refusal = f"outside the {self.role}'s write set"
            changes.violations.append(Violation(path, refusal))
        for rel in sorted(set(self.materialized) - seen):
            if self.owned.holder(rel) is not None:
                continue  # judged below
            if any(rel.startswith(prefix) for prefix in unread):
                continue  # not read, so not known to be deleted
            if allowed(rel, self.patterns):
                changes.files[rel] = None
            else:
                changes.violations.append(
                    Violation(
                        f"{self.unit_rel}/{rel}", f"deleted outside the {self.role}'s write set"
                    )
                )
        self._judge_records(changes)
        return changes

    def _owned_entry(self, rel: str, kind: str, changes: Changes) -> bool:
        """Whether rel is a tool-owned file or lies beneath one (made a directory): those
        are judged against their records, never taken from the view."""
        holder = self.owned.holder(rel)
        if holder is None:
            return False
        if holder != rel and kind != "dir":
            record = self.owned.get(holder)
            assert record is not None
            changes.violations.append(
                Violation(
                    f"{self.unit_rel}/{rel}",
                    f"inside {holder}, which only {record.owner} writes: discarded",
                    owner=record.owner,
                )
            )
        return True

    def _judge_records(self, changes: Changes) -> None:
        """Report every tool-owned file the view does not hold as its tool wrote it, and
        commit the tool's bytes (the session's change never reaches the store)."""
        for rel, record in self.owned:
            found, data = self._found(rel, record.data)
            reason = record.judge(found, data)
            if reason is not None:
                changes.violations.append(
                    Violation(f"{self.unit_rel}/{rel}", reason, owner=record.owner)
                )
            if record.data is not None and self._base.get(rel) != record.data:
                changes.files[rel] = record.data

    def _found(self, rel: str, expected: bytes | None) -> tuple[Found, bytes | None]:
        """What the view holds at a tool-owned path, read beneath the handle."""
        path = f"{self.unit_rel}/{rel}"
        try:
            st = self.files.lstat(path)
            if st is None:
                return "absent", None
            if not stat.S_ISREG(st.st_mode) or st.st_size != len(expected or b""):
                return "other", None  # not a file, or not the record's size: not read
            return "file", self.files.read_bytes(path, cap=st.st_size + 1)
        except OSError:
            return "other", None  # a link on the way, or replaced since: not the record

    def _refusal(self, entry: Entry, budget: int) -> str | None:
        """Why a file in the view can never be committed, or None."""
        if entry.kind == "symlink":
            path = f"{self.unit_rel}/{entry.rel}"
            target = self.files.readlink(path)
            if _lands_inside(path, target):
                return "symlink (commit the file itself)"
            return f"symlink points outside the view ({printable(target)})"
        if entry.kind != "file":
            return "not a regular file (device, fifo or socket)"
        if entry.size > self.file_cap_bytes:
            return f"file of {entry.size} bytes is over the cap of {self.file_cap_bytes}"
        if entry.size > budget:
            return f"reading it would pass the unit's cap of {self.file_cap_bytes} bytes"
        return None

    # --- what the agent loop needs: change detection and crash-safe snapshots ---------

    def fingerprint(self) -> str:
        """A digest of the unit dir's entries (names, kinds, sizes, mtimes): equal digests
        mean nothing changed. Bounded by the unit limits, like everything else here."""
        h = hashlib.sha256()
        try:
            for e in walk(self.files, self.unit_rel, self.limits):
                h.update(f"{e.rel}\0{e.kind}\0{e.size}\0{e.mtime_ns}\0{e.problem}\n".encode())
        except TooMany:
            h.update(b"over the file cap")
        return h.hexdigest()

    def snapshot(self) -> dict[str, str | None]:
        """Accepted changes so far, base64-encoded (None = deleted), for a checkpoint."""
        return {
            rel: None if data is None else base64.b64encode(data).decode()
            for rel, data in self.collect().files.items()
        }

    def restore(self, snapshot: dict[str, str | None]) -> None:
        """Re-apply a checkpoint's changes to a freshly materialized view.

        A snapshot holds a tool-owned file only as its tool wrote it (collect() never takes
        one from the view), so a resumed session's records are rebuilt from it.
        """
        for rel, encoded in snapshot.items():
            if encoded is not None and self.owned.get(rel) is not None:
                self.owned.wrote(rel, base64.b64decode(encoded))
        self._apply(snapshot)

    def _apply(self, snapshot: dict[str, str | None]) -> None:
        """Write (or delete) each file of a snapshot in the view."""
        for rel, encoded in snapshot.items():
            path = f"{self.unit_rel}/{rel}"
            if encoded is None:
                with contextlib.suppress(FileNotFoundError):
                    self.files.remove(path)
            else:
                self.files.write_atomic(path, base64.b64decode(encoded), 0o644)

    def revert_to(self, snapshot: dict[str, str | None]) -> None:
        """Put the write set back as it was when `snapshot()` returned `snapshot`: changes
        made since are undone (files created since are removed). Tool-owned files stay as
        their tools last wrote them: coder.log keeps every decision, reverted or not."""
        wanted: dict[str, str | None] = {
            rel: None if rel not in self._base else base64.b64encode(self._base[rel]).decode()
            for rel in self.collect().files
        }
        wanted.update(snapshot)
        self._apply({rel: v for rel, v in wanted.items() if self.owned.get(rel) is None})

    def describe_changes(self) -> str:
        """One line per changed or refused path since materialize, for a reassess turn."""
        changes = self.collect()
        lines = [
            f"{'deleted' if data is None else f'changed ({len(data)} bytes)'}: {rel}"
            for rel, data in sorted(changes.files.items())
        ]
        lines += [f"refused: {v}" for v in changes.violations]
        return "\n".join(lines) or "(no changes)"

    def commit(self) -> CommitOutcome:
        """Apply accepted changes with compare-and-set on (unit version, attempt)."""
        changes = self.collect()
        result = self.store.commit_files(
            self.pid,
            self.unit,
            role=self.committer,
            attempt=self.attempt,
            base_version=self.base_version,
            changes=changes.files,
            fence=self.fence,
        )
        return CommitOutcome(
            applied=result.applied,
            version=result.version,
            committed=sorted(changes.files) if result.applied else [],
            violations=changes.violations,
            reason=result.reason,
        )

    def remove_with_view(self, remove: Callable[[], None]) -> None:
        """Have `cleanup` call `remove` too (something the session laid out beside it)."""
        self._also.append(remove)

    def cleanup(self) -> None:
        """Remove the view, whatever the session left in it (deep trees, unwritable dirs)."""
        while self._also:
            try:
                self._also.pop()()
            except OSError:
                log.exception("could not remove what the session laid out beside its view")
        if self._dir is not None:
            self._dir.close()
            self._dir = None
        if self.root is not None:
            root, self.root = self.root, None
            try:
                remove_view(root)
            except OSError:
                # Its lock is released all the same: a later sweep removes it.
                log.exception("could not remove the view %s", root)


def _lands_inside(link: str, target: str) -> bool:
    """Whether a link's target names a path inside the view, read as text (never resolved)."""
    if target.startswith("/"):
        return False
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(link), target))
    return joined != ".." and not joined.startswith("../")
