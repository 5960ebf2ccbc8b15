"""Leases: one live owner per (unit, attempt, role), kept alive by heartbeats.

Redis delivery is at-least-once and redelivers a task that outlives the visibility
timeout while it still runs; the lease is how the second delivery sees the first.
"""

from __future__ import annotations

from redis.client import Pipeline

from devloop.store import scripts
from devloop.store.base import StoreBase, text
from devloop.store.fence import Fence


def _ttl_ms(ttl_s: float) -> int:
    """A TTL in whole milliseconds, at least 1 (PX 0 is an error)."""
    return max(1, round(ttl_s * 1000))


class LeasesMixin(StoreBase):
    """`acquire_lease`, `heartbeat`, `release`, `lease_owner(s)` and `any_lease`."""

    def acquire_lease(
        self, pid: str, unit: str, attempt: int, role: str, owner: str, ttl_s: float
    ) -> bool:
        """Take the lease for ttl_s (SET NX PX); True also when owner already holds it."""
        key = self.keys(pid).lease(unit, attempt, role)
        return bool(self._acquire_lease(keys=[key], args=[owner, _ttl_ms(ttl_s)]))

    def heartbeat(
        self, pid: str, unit: str, attempt: int, role: str, owner: str, ttl_s: float
    ) -> bool:
        """Extend the lease to ttl_s from now, only while owner still holds it."""
        key = self.keys(pid).lease(unit, attempt, role)
        return bool(self._heartbeat_lease(keys=[key], args=[owner, _ttl_ms(ttl_s)]))

    def lease_fence(self, pid: str, unit: str, attempt: int, role: str, owner: str) -> Fence:
        """The fence of owner's writes under the lease of (unit, attempt, role)."""
        return Fence(self.keys(pid).lease(unit, attempt, role), owner)

    def release(self, pid: str, unit: str, attempt: int, role: str, owner: str) -> bool:
        """Give the lease up if owner holds it; True if it was released."""
        key = self.keys(pid).lease(unit, attempt, role)
        return bool(self._release_lease(keys=[key], args=[owner]))

    def queue_release(
        self, pipe: Pipeline, pid: str, unit: str, attempt: int, role: str, owner: str
    ) -> None:
        """`release` as one more command of pipe (its reply comes with the pipeline's)."""
        key = self.keys(pid).lease(unit, attempt, role)
        # EVAL, not the registered script: a pipeline holding one asks SCRIPT EXISTS first,
        # a round trip of its own.
        pipe.eval(scripts.RELEASE_LEASE, 1, key, owner)

    def drop_leases(self, pid: str) -> int:
        """Remove every lease of pid (only when no worker of the project can be alive);
        how many were removed."""
        keys = list(self.client.scan_iter(match=self.keys(pid).lease_pattern, count=500))
        return int(self.client.unlink(*keys)) if keys else 0

    def any_lease(self, pid: str) -> bool:
        """Whether any step of the project holds its lease."""
        match = self.keys(pid).lease_pattern
        return next(self.client.scan_iter(match=match, count=500), None) is not None

    def lease_owners(self, pid: str, leases: list[tuple[str, int, str]]) -> list[str | None]:
        """Who holds each (unit, attempt, role) lease now (None: nobody), in one round trip."""
        if not leases:
            return []
        keys = self.keys(pid)
        return [text(o) for o in self.client.mget([keys.lease(*lease) for lease in leases])]

    def lease_owner(self, pid: str, unit: str, attempt: int, role: str) -> str | None:
        """Who holds the lease now, or None."""
        return text(self.client.get(self.keys(pid).lease(unit, attempt, role)))
