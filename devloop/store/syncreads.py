"""What a folder sync reads of the agent-state files and memory notes while a run goes on."""

from __future__ import annotations

from collections.abc import Sequence

from devloop.store.base import StoreBase, decode_hash

Cursors = tuple[int, int]  # where the sweep stands in agent-state and in memory


class SyncReadsMixin(StoreBase):
    """`agent_state_and_memory`, `agent_state_files` and `sweep_agent_state_and_memory`."""

    def agent_state_and_memory(self, pid: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
        """Every agent-state file and every memory note, in one round trip."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.agent_state)
            pipe.hgetall(keys.memory)
            state, memory = pipe.execute()
        return decode_hash(state), decode_hash(memory)

    def agent_state_files(self, pid: str, names: Sequence[str]) -> dict[str, bytes]:
        """The named agent-state files that exist."""
        if not names:
            return {}
        found = self.client.hmget(self.keys(pid).agent_state, list(names))
        return {n: d for n, d in zip(names, found, strict=True) if d}

    def sweep_agent_state_and_memory(
        self, pid: str, cursors: Cursors, count: int
    ) -> tuple[Cursors, dict[str, bytes], dict[str, bytes]]:
        """The next slice (about count fields) of agent state and of the notes, from the
        cursors (0, 0 starts over); the cursors after it."""
        keys = self.keys(pid)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.hscan(keys.agent_state, cursors[0], count=count)
            pipe.hscan(keys.memory, cursors[1], count=count)
            (state_at, state), (memory_at, memory) = pipe.execute()
        return (state_at, memory_at), decode_hash(state), decode_hash(memory)
