"""A fork server whose children sleep (tests/test_forker.py): the protocol without Celery.

A child's args: seconds to sleep, then the exit code. Each child is slow to get going (as
one forked from a large heap can be): its first 0.2 s pass before the server's own code runs
in it, so whatever the server answers about it must already hold. The server and each child
print a stray line to stdout, where the server's answers go, as a library might."""

from __future__ import annotations

import os
import time

from devloop.server.forker import serve

SLOW_START_S = 0.2


def sleep_then_exit(args: list[str]) -> int:
    """Say so in the log, sleep args[0] seconds, return args[1]."""
    print(f"child {' '.join(args)}", flush=True)
    time.sleep(float(args[0]))
    return int(args[1])


def slow_start() -> None:
    """A child's first moments: slow, and noisy on stdout (as a library can be)."""
    print("a stray line from a child, before its log", flush=True)
    time.sleep(SLOW_START_S)


if __name__ == "__main__":
    print("a stray line at import", flush=True)  # before serve(): on the answers' pipe
    os.register_at_fork(after_in_child=slow_start)
    serve(sleep_then_exit)
