"""Step records and the marks a unit's release leaves: what a step produced (JSON, read
back on redelivery), the sessions' progress, the release claims and the environment error.

The store keeps step records as the JSON the fleet gives it (fleet/records.py owns their
model); the check-then-write steps (begin a step and take its lease, save a record once
while the lease holds, claim a dependent's release) run as Lua scripts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devloop.store import scripts
from devloop.store.base import StoreBase, decode_hash, text
from devloop.store.fence import Fence, fenced
from devloop.store.records import UnitState

# KEYS: lease, steps, state.  ARGV: owner, lease ttl_ms, step field, the attempt's coder
# field.  A step that ran to the end returns its record and takes no lease; any other
# takes it as the store's acquire_lease does (the same script, run inline: its KEYS[1]
# and ARGV[1..2] line up). The coder's record comes along: a tester step tests only
# what a coder step of its attempt finished.
BEGIN_STEP = f"""
local function acquire_lease()
{scripts.ACQUIRE_LEASE}
end
local record = redis.call('HGET', KEYS[2], ARGV[3])
local state = redis.call('GET', KEYS[3])
local coder = redis.call('HGET', KEYS[2], ARGV[4])
if record then
  return {{record, state or false, 0, coder or false}}
end
return {{false, state or false, acquire_lease(), coder or false}}
"""

# KEYS: steps, lease.  ARGV: step field, record, owner.  The record of a step that still
# holds its lease, stored (unless one is there) and the lease given up in the same step.
SAVE_FENCED = (
    scripts.FENCE_CHECK.format(key=2, arg=3)
    + """
local created = redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
local stored = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return {created, stored}
"""
)

# KEYS: the dependent's finished set, its dispatched mark.  ARGV: the unit that passed,
# how many dependencies the dependent has, the mark.  Adds a finished dependency and, when
# the set is complete, claims the dependent's release with SET NX: of N dependencies
# finishing at once, exactly one call returns 1.
RELEASE = """
redis.call('SADD', KEYS[1], ARGV[1])
if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  if redis.call('SET', KEYS[2], ARGV[3], 'NX') then return 1 end
end
return 0
"""


@dataclass(frozen=True)
class BegunStep:
    """What a delivered step finds: its stored record (JSON) if it ran to the end, the
    unit's state, whether it now holds the lease, and its attempt's coder record."""

    record: bytes | None
    state: UnitState
    leased: bool
    coder: bytes | None


def _ttl_ms(ttl_s: float) -> int:
    return max(1, round(ttl_s * 1000))


class StepsMixin(StoreBase):
    """Step records, progress, release claims, definitions and the environment error."""

    def step_record(self, pid: str, unit: str, name: str) -> bytes | None:
        """One stored step record (JSON) by its field, or None."""
        raw: bytes | None = self.client.hget(self.keys(pid).steps(unit), name)
        return raw

    def state_and_step_records(
        self, pid: str, unit: str, names: list[str]
    ) -> tuple[UnitState, list[bytes | None]]:
        """The unit's state and the named step records, in one round trip."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(keys.state(unit))
            pipe.hmget(keys.steps(unit), names)
            raw_state, records = pipe.execute()
        return (UnitState.model_validate_json(raw_state) if raw_state else UnitState(),
                list(records))

    def begin_step(
        self, pid: str, unit: str, attempt: int, lease_role: str, owner: str, ttl_s: float,
        name: str, coder_name: str,
    ) -> BegunStep:
        """Look the step up and take its lease in one round trip (a step that ran to the
        end takes no lease)."""
        keys = self.keys(pid)
        script = self.client.register_script(BEGIN_STEP)
        record, state, leased, coder = script(
            keys=[keys.lease(unit, attempt, lease_role), keys.steps(unit), keys.state(unit)],
            args=[owner, _ttl_ms(ttl_s), name, coder_name],
        )
        return BegunStep(record or None,
                         UnitState.model_validate_json(state) if state else UnitState(),
                         bool(leased), coder or None)

    def save_step_record(
        self, pid: str, unit: str, name: str, data: str, fence: Fence | None = None,
        also: Callable[[Any], object] = lambda pipe: None,
    ) -> tuple[bool, bytes]:
        """Store a record unless one is there already: (created, the stored one). With a
        fence, only while the step holds its lease (LeaseLost if not), the lease given up
        with it; `also` queues more commands into the same round trip (unfenced only)."""
        key = self.keys(pid).steps(unit)
        if fence is not None:
            with fenced(fence):
                created, stored = self.client.eval(SAVE_FENCED, 2, key, fence.lease, name,
                                                   data, fence.owner)
            return bool(created), stored
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hsetnx(key, name, data)
            pipe.hget(key, name)
            also(pipe)
            created, stored = pipe.execute()[:2]
        return bool(created), stored

    def step_records(self, pid: str, units: list[str]) -> dict[str, list[bytes]]:
        """Every stored step record (JSON) of each listed unit, in one round trip."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            for unit in units:
                pipe.hgetall(keys.steps(unit))
            replies = pipe.execute()
        return {unit: list(raw.values()) for unit, raw in zip(units, replies, strict=True)}

    def record_progress(self, pid: str, unit: str, data: str) -> None:
        """Keep the unit's running session's last step (StepProgress JSON)."""
        self.client.hset(self.keys(pid).progress, unit, data)

    def progress_of(self, pid: str, units: list[str]) -> dict[str, bytes]:
        """The last progress record of each listed unit that has one."""
        raw = self.client.hmget(self.keys(pid).progress, units) if units else []
        return {unit: v for unit, v in zip(units, raw, strict=True) if v}

    def environment_error(self, pid: str) -> str | None:
        """The environment problem a worker reported for this project, if any."""
        raw = self.client.get(self.keys(pid).environment_error)
        return raw.decode("utf-8", errors="replace") if raw else None

    def set_environment_error(self, pid: str, why: str | None) -> None:
        """Report why no session can run here (None: forget it, a new try)."""
        if why is None:
            self.client.delete(self.keys(pid).environment_error)
        else:
            self.client.set(self.keys(pid).environment_error, why)

    def claim_root(self, pid: str, unit: str) -> bool:
        """Mark a root unit released, once (SET NX); True for the first claim."""
        return bool(self.client.set(self.keys(pid).dispatched(unit), "root", nx=True))

    def mark_dispatched(self, pid: str, units: list[str], how: str) -> None:
        """Mark units released (`again`, `reconciled`) whatever they held."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            for unit in units:
                pipe.set(keys.dispatched(unit), how)
            pipe.execute()

    def claim_releases(self, pid: str, unit: str, users: dict[str, int]) -> list[str]:
        """Record that unit passed for each dependent (name -> how many dependencies it
        has); the dependents this release completes and claims, in order."""
        if not users:
            return []
        keys = self.keys(pid)
        # One round trip for all of them (EVAL: a pipeline would first ask SCRIPT EXISTS).
        with self.client.pipeline(transaction=False) as pipe:
            for user, needs in users.items():
                pipe.eval(RELEASE, 2, keys.finished(user), keys.dispatched(user), unit,
                          needs, unit)
            claimed = pipe.execute()
        return [u for u, claim in zip(users, claimed, strict=True) if claim]

    def definitions(self, pid: str) -> dict[str, bytes]:
        """unit -> Definition (JSON) each unit was last run on."""
        return decode_hash(self.client.hgetall(self.keys(pid).definitions))

    def record_definitions(self, pid: str, mapping: dict[str, str]) -> None:
        """Remember units' definitions (JSON) as the ones they run on from now."""
        self.client.hset(self.keys(pid).definitions, mapping=mapping)  # type: ignore[arg-type]

    def take_reconcile_lock(self, pid: str, ttl_s: int) -> bool:
        """Claim the project's reconcile pass for ttl_s; False while another holds it."""
        return bool(self.client.set(self.keys(pid).reconcile_lock, "1", nx=True, ex=ttl_s))

    def dispatched_mark(self, pid: str, unit: str) -> str | None:
        """How the unit was first released (root, again, reconciled), or None."""
        return text(self.client.get(self.keys(pid).dispatched(unit)))
