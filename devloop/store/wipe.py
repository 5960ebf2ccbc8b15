"""Taking a unit's runs away: everything a reset or a rerun must not find again.

What the unit is made of (its spec, its state's spend) stays; what its runs left (commit
markers, step and release records, the passed and review copies, sessions, leases, live
output, progress, its recorded definition, a cancel flag, agent state, pending notes) goes.
"""

from __future__ import annotations

from collections.abc import Sequence

from devloop.store.base import StoreBase


class WipeMixin(StoreBase):
    """`unit_leases`, `wipe_unit_runs`, `next_reset_marker` and `forget_runs`."""

    def unit_leases(self, pid: str, unit: str) -> list[tuple[int, str]]:
        """The (attempt, role) of every lease of the unit held now, in key order."""
        found = sorted(k.decode() for k in self.client.scan_iter(
            match=self.keys(pid).unit_lease_pattern(unit)))
        held = []
        for key in found:  # ...:lease:{unit}:{attempt}:{role}; a role holds no colon
            attempt, role = key.rsplit(":", 2)[1:]
            held.append((int(attempt), role))
        return held

    def wipe_unit_runs(self, pid: str, unit: str, *, users: Sequence[str],
                       agent_state: Sequence[str], note_prefixes: Sequence[str]) -> None:
        """Drop what the unit's runs left, in one transaction: its keys, its release mark
        in each of its users' records, its progress, definition and cancel flag, the named
        agent-state files and the memory notes under any of note_prefixes."""
        keys = self.keys(pid)
        doomed = [keys.commits(unit), keys.passed(unit), keys.steps(unit), keys.dispatched(unit),
                  keys.approved(unit), keys.approved_meta(unit), keys.output_runs(unit)]
        for pattern in (keys.unit_session_pattern(unit), keys.unit_lease_pattern(unit),
                        keys.output_pattern(unit)):
            doomed += [k.decode() for k in self.client.scan_iter(match=pattern)]
        notes = [f.decode() for f in self.client.hkeys(keys.memory)
                 if f.decode().startswith(tuple(note_prefixes))]
        with self.client.pipeline(transaction=True) as pipe:
            pipe.delete(*doomed)
            for user in users:
                pipe.srem(keys.finished(user), unit)
            pipe.hdel(keys.progress, unit)
            pipe.hdel(keys.definitions, unit)  # the next run records it afresh
            pipe.hdel(keys.control, f"cancel:{unit}")
            if agent_state:
                pipe.hdel(keys.agent_state, *agent_state)
            if notes:
                pipe.hdel(keys.memory, *notes)
            pipe.execute()

    def next_reset_marker(self, pid: str, unit: str) -> int:
        """A number no earlier reset of the unit used (a reset's commit is (reset, n))."""
        return int(self.client.hincrby(self.keys(pid).control, f"reset:{unit}", 1))

    def forget_runs(self, pid: str, unit: str, roles: Sequence[str],
                    users: Sequence[str]) -> None:
        """Drop the unit's sessions of roles and its release records (it was released, and
        released each of users), so it starts afresh and is released again, exactly once."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            for role in roles:
                pipe.delete(keys.session(role, unit))
            pipe.delete(keys.dispatched(unit))
            for user in users:
                pipe.srem(keys.finished(user), unit)
            pipe.execute()
