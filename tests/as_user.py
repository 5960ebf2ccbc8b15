"""Run a function as another uid in a forked child: a non-root worker, played by a root test.

The child is forked, not started afresh, so it needs no file of the checkout (a clone in a
0700 directory, the venv's interpreter under /root): it already holds every module. It
forgets what this process learnt as root about cgroups and bubblewrap, drops to the uid,
optionally installs a Docker seccomp profile on itself (tests/docker_seccomp.py), runs the
function and sends back its JSON-able result.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devloop.sandbox.bwrap import find_bwrap
from tests.docker_seccomp import install


def worker_uid() -> int:
    """A non-root worker's uid: 4242 (not the sandbox's 65534) when the tests run as root,
    else the tests' own uid, which is one already."""
    return 4242 if os.geteuid() == 0 else os.getuid()


def worker_cache(uid: int) -> tuple[Path, Path]:
    """(a fresh cache dir the worker uid owns, a bubblewrap it can run): where the checkout
    is out of that uid's reach (a 0700 clone), the binary and its libraries are copied in,
    as a worker would have its own install. The caller removes the dir."""
    cache = Path(tempfile.mkdtemp(prefix="devloop-test-", dir="/var/tmp"))
    cache.chmod(0o755)
    bwrap = find_bwrap(cache, uid, uid)
    os.chown(cache, uid, uid)
    return cache, bwrap


def run_as(
    uid: int, work: Callable[[], Any], *, timeout_s: float, profile: Path | None = None
) -> Any:
    """work()'s result, computed as uid:uid in a forked child of its own process group;
    everything left in that group is killed afterwards, whatever happened. A non-root
    caller can only name its own uid."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 1
        try:
            os.close(read)
            os.setpgid(0, 0)
            signal.alarm(int(timeout_s) + 5)  # however the parent fares, the child ends
            _forget_what_root_learnt()
            rules = json.loads(profile.read_text()) if profile is not None else None
            if uid != os.getuid():
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            if rules is not None:
                install(rules)
            answer = {"result": work()}
            status = 0
        except BaseException as exc:  # handed to the parent, which raises it
            answer = {"error": f"{exc!r}\n{traceback.format_exc()}"}
        with contextlib.suppress(BaseException):
            os.write(write, json.dumps(answer).encode())
        os._exit(status)
    os.close(write)
    chunks: list[bytes] = []
    try:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([read], [], [], left)
            if not ready:
                break
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    if not chunks:
        raise TimeoutError(f"the child as uid {uid} answered nothing within {timeout_s} s")
    answer = json.loads(b"".join(chunks))
    if "error" in answer:
        raise RuntimeError(f"as uid {uid}: {answer['error']}")
    return answer["result"]


def _forget_what_root_learnt() -> None:
    """Drop the per-process caches a root parent filled (cgroups it may write, bubblewrap's
    probe as root): a non-root worker finds them out for itself."""
    from devloop.sandbox import bwrap, cgroups, meter, weight

    meter._parent.clear()
    cgroups._v1_parents.clear()
    cgroups._said.clear()
    bwrap._probe.cache_clear()
    weight.sandbox_group.cache_clear()
