"""A session's least-privilege view of one unit: materialize it, collect changes, commit them.

The view holds only what the role may read (its unit, its own SDD section, upstream
contract.json files, units.json); what it may write is the role's write set. Changes
outside the write set are never committed: they come back as violations.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from devloop.config import Settings
from devloop.sandbox.base import new_view_dir
from devloop.store import RedisStore, UnitSource
from devloop.writeset import allowed, writable_roots, write_set


@dataclass(frozen=True)
class Violation:
    """A change the role was not allowed to make, and why it was refused."""

    path: str
    reason: str

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
    """The materialized view of (role, unit, attempt) in a fresh scratch dir."""

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
    ) -> None:
        self.store, self.pid, self.unit, self.role, self.attempt = store, pid, unit, role, attempt
        self.run_id = run_id
        # A tester's second try in the same attempt commits once more, under its own name.
        self.committer = role if try_no == 1 else f"{role}.{try_no}"
        self.patterns = write_set(role, run_id)
        self.settings = settings
        self.file_cap_bytes = settings.file_cap_bytes
        self.root: Path | None = None
        self.base_version = 0
        self.materialized: dict[str, str] = {}

    @property
    def unit_rel(self) -> str:
        """The unit dir relative to the view root: the cwd of every tool."""
        return f"units/{self.unit}"

    @property
    def unit_dir(self) -> Path:
        """The unit dir on the host."""
        assert self.root is not None, "materialize() first"
        return self.root / self.unit_rel

    def writable(self) -> list[str]:
        """View-relative paths to bind writable in the sandbox."""
        return [f"{self.unit_rel}/{p}" for p in writable_roots(self.patterns)]

    def materialize(self, source: UnitSource | None = None) -> Path:
        """Write the role's view into a fresh scratch dir and return its root.

        `source` is the unit as read from Redis when the caller has read it already.
        """
        source = source or self.store.unit_source(self.pid, self.unit)
        # Under the cache dir, not a 0700 temp dir: the sandbox uid must reach the view.
        root = new_view_dir(self.settings, prefix=f"{self.role}-{self.unit}-")
        self.root = root
        self._write("units.json", source.record.units_text)
        self._write(f"sdd/mvcp/{self.unit}.html", source.sdd_section or "")
        for dep, contract in source.upstream.items():
            self._write(f"units/{dep}/contract.json", contract)
        files = source.files
        self.base_version = files.version
        for rel, data in files.files.items():
            self._write(f"{self.unit_rel}/{rel}", data, track=True)
        (root / self.unit_rel).mkdir(parents=True, exist_ok=True)
        return root

    def _write(self, rel: str, data: bytes | str, track: bool = False) -> None:
        """Write one file of the view, world-readable, remembering unit files' digests."""
        assert self.root is not None
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = data.encode() if isinstance(data, str) else data
        path.write_bytes(blob)
        os.chmod(path, 0o644)
        for parent in path.relative_to(self.root).parents:
            os.chmod(self.root / parent, 0o755)
        if track:
            self.materialized[rel.removeprefix(self.unit_rel + "/")] = _digest(blob)

    def collect(self) -> Changes:
        """Diff the unit dir against what was materialized, judging each change."""
        assert self.root is not None, "materialize() first"
        changes = Changes()
        seen: set[str] = set()
        unit_dir = self.unit_dir
        for path in sorted(unit_dir.rglob("*")):
            rel = path.relative_to(unit_dir).as_posix()
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            seen.add(rel)
            refusal = self._refusal(path, rel, mode)
            if refusal is None:
                data = path.read_bytes()
                if not data and rel not in self.materialized:
                    continue  # an empty placeholder the sandbox created to bind: not a write
                if self.materialized.get(rel) == _digest(data):
                    continue
                if allowed(rel, self.patterns):
                    changes.files[rel] = data
                    continue
                refusal = f"outside the {self.role}'s write set"
            changes.violations.append(Violation(f"{self.unit_rel}/{rel}", refusal))
        for rel in sorted(set(self.materialized) - seen):
            if allowed(rel, self.patterns):
                changes.files[rel] = None
            else:
                changes.violations.append(
                    Violation(
                        f"{self.unit_rel}/{rel}", f"deleted outside the {self.role}'s write set"
                    )
                )
        return changes

    def _refusal(self, path: Path, rel: str, mode: int) -> str | None:
        """Why a file in the view can never be committed, or None."""
        if stat.S_ISLNK(mode):
            target = os.path.realpath(path)
            inside = self.root is not None and target.startswith(str(self.root) + os.sep)
            return (
                "symlink (commit the file itself)"
                if inside
                else (f"symlink points outside the view ({os.readlink(path)})")
            )
        if not stat.S_ISREG(mode):
            return "not a regular file (device, fifo or socket)"
        size = path.lstat().st_size
        if size > self.file_cap_bytes:
            return f"file of {size} bytes is over the cap of {self.file_cap_bytes}"
        return None

    # --- what the agent loop needs: change detection and crash-safe snapshots ---------

    def fingerprint(self) -> str:
        """A digest of the unit dir's current files: equal digests mean nothing changed."""
        h = hashlib.sha256()
        for path in sorted(self.unit_dir.rglob("*")):
            if path.is_file() and not path.is_symlink():
                h.update(path.relative_to(self.unit_dir).as_posix().encode() + b"\0")
                h.update(_digest(path.read_bytes()).encode())
        return h.hexdigest()

    def snapshot(self) -> dict[str, str | None]:
        """Accepted changes so far, base64-encoded (None = deleted), for a checkpoint."""
        return {
            rel: None if data is None else base64.b64encode(data).decode()
            for rel, data in self.collect().files.items()
        }

    def restore(self, snapshot: dict[str, str | None]) -> None:
        """Re-apply a checkpoint's changes to a freshly materialized view."""
        for rel, encoded in snapshot.items():
            path = self.unit_dir / rel
            if encoded is None:
                path.unlink(missing_ok=True)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(base64.b64decode(encoded))
                os.chmod(path, 0o644)

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
        )
        return CommitOutcome(
            applied=result.applied,
            version=result.version,
            committed=sorted(changes.files) if result.applied else [],
            violations=changes.violations,
            reason=result.reason,
        )

    def cleanup(self) -> None:
        """Remove the scratch dir."""
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
