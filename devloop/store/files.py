"""Unit files: path -> bytes with a version, committed by compare-and-set once per attempt."""

from __future__ import annotations

from devloop.core.errors import FileTooLarge
from devloop.store.base import StoreBase, decode_hash
from devloop.store.fence import Fence, fenced
from devloop.store.filesets import safe_relpath, too_large
from devloop.store.records import CommitResult, UnitFiles


class FilesMixin(StoreBase):
    """`unit_files`, `unit_file`, `unit_versions` and `commit_files`."""

    def unit_files(self, pid: str, unit: str) -> UnitFiles:
        """The unit's files and their version, read together (version 0: never written)."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.hget(keys.meta(unit), "version")
            pipe.hgetall(keys.files(unit))
            version, files = pipe.execute()
        return UnitFiles(version=int(version or 0), files=decode_hash(files))

    def unit_file(self, pid: str, unit: str, path: str) -> bytes | None:
        """One file of a unit (an upstream contract.json), without reading the rest."""
        data: bytes | None = self.client.hget(self.keys(pid).files(unit), path)
        return data

    def unit_versions(self, pid: str, units: list[str]) -> dict[str, int]:
        """The version of each listed unit's files (no file contents), in one round trip."""
        with self.client.pipeline(transaction=False) as pipe:
            for unit in units:
                pipe.hget(self.keys(pid).meta(unit), "version")
            return {u: int(v or 0) for u, v in zip(units, pipe.execute(), strict=True)}

    def commit_files(
        self,
        pid: str,
        unit: str,
        *,
        role: str,
        attempt: int,
        base_version: int,
        changes: dict[str, bytes | None],
        fence: Fence | None = None,
    ) -> CommitResult:
        """Apply changes (None deletes) if the unit is still at base_version and this
        (role, attempt) has not committed yet; FileTooLarge if the result passes the cap.

        With a fence, only while the step's lease is still its own (LeaseLost if not)."""
        keys = self.keys(pid)
        args: list[str | bytes | int] = [
            f"{role}:{attempt}", base_version, self.file_cap_bytes, fence.owner if fence else ""
        ]
        for path, data in changes.items():
            name = safe_relpath(path).as_posix()
            args += [name, "d", b""] if data is None else [name, "w", data]
        names = [keys.files(unit), keys.meta(unit), keys.commits(unit)]
        with fenced(fence):
            reply = self._commit_files(keys=names + ([fence.lease] if fence else []), args=args)
        applied, version = bool(reply[0]), int(reply[1])
        reason = reply[2].decode() if len(reply) > 2 else None
        if reason == "too large":
            raise self._too_large(pid, unit, int(reply[3]), changes)
        return CommitResult(applied=applied, version=version, reason=reason)

    def _too_large(
        self, pid: str, unit: str, size: int, changes: dict[str, bytes | None]
    ) -> FileTooLarge:
        """The FileTooLarge for a refused commit, naming the unit's largest files after it."""
        files = self.client.hgetall(self.keys(pid).files(unit))
        sizes = {k.decode(): len(v) for k, v in files.items()}
        for path, data in changes.items():
            if data is None:
                sizes.pop(path, None)
            else:
                sizes[path] = len(data)
        return too_large(pid, unit, size, self.file_cap_bytes, sizes)
