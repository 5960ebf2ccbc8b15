"""How an operation's CPU per item grows with the number of items: linear code keeps it
flat, quadratic code multiplies it by the size ratio.

Measured as CPU (process_time), best of a few tries, so a busy machine's waits do not
count; the sizes differ tenfold, so linear code measures about 1 and quadratic about 10.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
LINEAR = 3.0  # the bound a test holds growth to: well above n log n, well below n^2


def per_item_growth(
    make: Callable[[int], T], work: Callable[[T], object], small: int, large: int,
    tries: int = 3,
) -> float:
    """CPU per item of work(make(large)) over CPU per item of work(make(small)); make's
    own cost is not measured."""
    return (_cpu(work, make(large), tries) / large) / (_cpu(work, make(small), tries) / small)


def _cpu(work: Callable[[T], object], data: T, tries: int) -> float:
    """The least CPU seconds one call of work(data) took, repeated to at least 20 ms, with
    the cyclic GC off: its full collections walk every object the process holds, so they
    would charge a large size for the test run's other objects (and doubled the measure of
    linear code on a busy machine)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _least(work, data, tries)
    finally:
        if enabled:
            gc.enable()


def _least(work: Callable[[T], object], data: T, tries: int) -> float:
    """The least CPU seconds of one call over `tries` rounds of calls."""
    best = float("inf")
    for _ in range(tries):
        calls = 0
        start = time.process_time()
        while True:
            work(data)
            calls += 1
            spent = time.process_time() - start
            if spent >= 0.02:
                break
        best = min(best, spent / calls)
    return best
