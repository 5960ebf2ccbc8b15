"""The review gate's record: the files of a unit as last approved, and that approval."""

from __future__ import annotations

from devloop.store.base import StoreBase, decode_hash

Meta = dict[str, bytes | float | int | str]


class ReviewsMixin(StoreBase):
    """`save_approval` and `approval`."""

    def save_approval(self, pid: str, unit: str, files: dict[str, bytes], meta: Meta) -> None:
        """Make files the unit's approved version (whole: what was approved before and is
        not among them goes), with its meta (version, digest, attempt, by, ts)."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(keys.approved(unit))
            if files:
                pipe.hset(keys.approved(unit), mapping=dict(files.items()))
            pipe.hset(keys.approved_meta(unit), mapping=dict(meta.items()))
            pipe.execute()

    def approval(self, pid: str, unit: str) -> tuple[dict[str, bytes], int | None]:
        """The unit's files as last approved and the attempt approved ({}, None: never)."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.approved(unit))
            pipe.hget(keys.approved_meta(unit), "attempt")
            raw, attempt = pipe.execute()
        return decode_hash(raw), int(attempt) if attempt is not None else None
