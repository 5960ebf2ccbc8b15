"""Prompt-cache accounting by Anthropic's rules, kept in the stub server's memory.

A prefix up to a cache_control breakpoint is written to the cache; a later request
whose prefix up to some block matches a written one exactly reads it. From each
breakpoint the lookup walks back over up to `LOOKBACK` earlier block boundaries, which
is what lets a breakpoint that moves to the newest message hit the entry the previous
turn wrote. Entries never expire (the stub has no TTL).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

from devloop.core.errors import DevLoopError
from devloop.llm.stub.tokens import PrefixBlock

MAX_BREAKPOINTS = 4
LOOKBACK = 20


@dataclass(frozen=True)
class CacheUsage:
    """The input side of a response's usage."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


class TooManyBreakpoints(DevLoopError, ValueError):
    """More cache_control blocks than the API allows."""

    def __init__(self, found: int) -> None:
        self.found = found
        super().__init__(
            f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )


def prefix_hashes(blocks: list[PrefixBlock]) -> list[bytes]:
    """hashes[i] identifies the prefix blocks[0..i] (a rolling sha256)."""
    out: list[bytes] = []
    h = b""
    for block in blocks:
        h = hashlib.sha256(h + block.key.encode()).digest()
        out.append(h)
    return out


class PromptCache:
    """The set of written prefixes; thread-safe."""

    def __init__(self, min_tokens: int = 0, lookback: int = LOOKBACK) -> None:
        self.min_tokens = min_tokens  # shorter prefixes are never written, like the API's minimum
        self.lookback = lookback
        self._written: set[bytes] = set()
        self._lock = threading.Lock()

    def account(self, blocks: list[PrefixBlock]) -> CacheUsage:
        """Look the request's prefixes up, write its breakpoints, and split its input tokens."""
        breakpoints = [i for i, b in enumerate(blocks) if b.breakpoint]
        if len(breakpoints) > MAX_BREAKPOINTS:
            raise TooManyBreakpoints(len(breakpoints))
        hashes = prefix_hashes(blocks)
        cumulative: list[int] = []
        running = 0
        for block in blocks:
            running += block.tokens
            cumulative.append(running)

        def upto(i: int) -> int:
            return cumulative[i] if i >= 0 else 0

        with self._lock:
            read_end = -1
            for bp in breakpoints:
                for j in range(bp, max(-1, bp - self.lookback - 1), -1):
                    if hashes[j] in self._written:
                        read_end = max(read_end, j)
                        break
            writable = [bp for bp in breakpoints if upto(bp) >= max(self.min_tokens, 1)]
            self._written.update(hashes[bp] for bp in writable)
        write_end = max((bp for bp in writable if bp > read_end), default=-1)
        read = upto(read_end)
        created = upto(write_end) - read if write_end > read_end else 0
        return CacheUsage(
            input_tokens=running - upto(max(read_end, write_end)),
            cache_creation_input_tokens=created,
            cache_read_input_tokens=read,
        )

    def clear(self) -> None:
        """Forget every written prefix."""
        with self._lock:
            self._written.clear()
