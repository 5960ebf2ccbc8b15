"""A child process that dies with the thread or process that started it (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
# Loaded here, not in the child: a forked child of a threaded process must not dlopen.
_LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A preexec_fn: the child gets `sig` when the thread that started it exits, however
    it exits (SIGKILL included), so nothing outlives `devloop run`."""
    parent = os.getpid()

    def apply() -> None:
        _LIBC.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        # The parent may have died between fork and prctl: then no signal would come.
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return apply


def follow_parent(sig: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Called in a child already running (a Celery pool process, a forked worker): get `sig`
    when its parent dies. `parent`, the pid the parent had before the fork, also catches a
    parent that died before this call (the child's parent is then another process)."""
    expected = os.getppid() if parent is None else parent
    _LIBC.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    if os.getppid() != expected:  # it died before or while we asked
        os.kill(os.getpid(), sig)
