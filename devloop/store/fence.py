"""Fenced writes: a step writes only while its lease is still its own, checked with the write.

A worker paused past its lease (SIGSTOP, a swap storm, a VM migration) may wake up after
another worker took the step over. Every write it makes from then on must fail, not land:
each one runs as a Lua script that compares the lease's owner first, in the same atomic
step as the write. A failed check raises LeaseLost and the zombie step ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import redis

from devloop.core.errors import DevLoopError

LOST = "DEVLOOP_LEASE_LOST"

# KEYS[1]: the lease; KEYS[2..]: the keys the command touches (declared, as scripts must).
# ARGV[1]: the owner; ARGV[2]: the command; ARGV[3..]: its arguments, keys included.
FENCED_CALL = f"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('{LOST}')
end
return redis.call(unpack(ARGV, 2))
"""


@dataclass(frozen=True)
class Fence:
    """A step's lease (its key and the owner that holds it): the condition of its writes."""

    lease: str
    owner: str


class LeaseLost(DevLoopError):
    """A fenced write found its lease expired or held by another worker: this step was
    taken over while it was paused, and must stop without writing anything more."""


def lost(error: redis.ResponseError) -> bool:
    """Whether a script's error is a failed fence check."""
    return LOST in str(error)


@contextmanager
def fenced(fence: Fence | None) -> Iterator[None]:
    """Turn a store script's failed fence check (scripts.FENCE_CHECK) into LeaseLost."""
    try:
        yield
    except redis.ResponseError as exc:
        if fence is not None and lost(exc):
            raise LeaseLost(f"lease {fence.lease} is no longer held by {fence.owner}") from None
        raise


def fenced_call(
    client: redis.Redis, fence: Fence, keys: list[str], command: str, *args: Any
) -> Any:
    """`command *args` if fence's lease is still its owner's; LeaseLost otherwise."""
    with fenced(fence):
        return client.eval(FENCED_CALL, 1 + len(keys), fence.lease, *keys, fence.owner,
                           command, *args)
