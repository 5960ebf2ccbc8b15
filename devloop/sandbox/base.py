"""What every sandbox shares: the observation, the protocol, limits, env and view paths."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from devloop.core.config import Settings
from devloop.safe.cachedir import ensure_public_dir as ensure_public_dir
from devloop.safe.safedir import Dir
from devloop.safe.safetree import Limits as WalkLimits
from devloop.safe.safetree import TooMany, walk
from devloop.sandbox.viewdir import make_view

# Where the view is mounted inside the sandbox; `cwd` and `writable` are relative to it.
SANDBOX_ROOT = PurePosixPath("/project")

# Exit status of a command that jsonGuard refused before anything ran (a usage error,
# as a shell reports a misused builtin).
REFUSED_EXIT = 2

# Why a command was killed: its time limit (time it was given, waits excluded), its CPU
# limit (all its processes together), wall time past the limit while starved of CPU, or
# its memory (all its processes together, where a cgroup holds it: cgroups.py).
Limit = Literal["time", "cpu", "starved", "memory"]

GiB = 1024**3
MiB = 1024**2


class Observation(BaseModel):
    """What one command did: exit status, capped output, timing, and why it never ran."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    exit_code: int  # 128+N when killed by signal N (137 on timeout); 2 when refused
    stdout: str  # capped; a marker at the end says how many bytes were cut
    stderr: str
    duration_ms: int  # wall time
    timed_out: bool = False  # killed at a limit (which one: `limit`)
    truncated: bool = False
    refused: str | None = None  # jsonGuard's message when the command never ran
    cpu_s: float = 0.0  # CPU used by all its processes
    wait_s: float = 0.0  # time it had runnable processes and none on a CPU
    limit: Limit | None = None
    meter: str = ""  # how cpu_s and wait_s were measured: "cgroup", "proc" or "" (never ran)


class Sandbox(Protocol):
    """Runs one shell command over a materialized view of a project."""

    def run(
        self,
        command: str,
        *,
        view: Path,
        cwd: str,
        writable: Sequence[str],
        timeout_s: float | None = None,
        ro_binds: Sequence[tuple[Path, str]] = (),
        tmpfs: Sequence[str] = (),
        pass_fds: Sequence[int] = (),
        on_output: Callable[[str, bytes], None] | None = None,
    ) -> Observation:
        """Run `command` with `/bin/sh -c` in `view/cwd`; only `writable` may change.

        `pass_fds` (inheritable or not) stay open in the command at the same numbers;
        `on_output` sees each chunk of stdout ("stdout") and stderr as it is read.
        """
        ...


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to every sandboxed process (setrlimit in the child)."""

    # Processes and threads of one command: RLIMIT_NPROC inside its own user namespace
    # (where the kernel counts only the command's), and pids.max where a cgroup holds it.
    # Node alone has about 11 threads, and vitest forks.
    processes: int = 256
    # RLIMIT_DATA, not RLIMIT_AS: V8 reserves huge PROT_NONE ranges (a 4 GiB RLIMIT_AS
    # makes `new WebAssembly.Memory` fail, and vite loads wasm); RLIMIT_DATA counts only
    # memory that is actually writable.
    data_bytes: int = 4 * GiB
    # All the command's memory together (its /tmp included), where a cgroup holds it.
    memory_bytes: int = 4 * GiB
    file_bytes: int = 64 * MiB
    cpu_s: int = 600
    # Size of the private /tmp tmpfs (bubblewrap only): tmpfs pages are host RAM.
    tmp_bytes: int = 512 * MiB
    # Scheduling priority: tests and builds are the CPU hogs of a worker server; at a
    # higher nice they leave the CPU to the worker processes and Redis whenever those wake.
    nice: int = 0


def default_limits(settings: Settings) -> Limits:
    """The limits the settings ask for (the rest at Limits' defaults)."""
    return Limits(
        processes=settings.sandbox_processes,
        memory_bytes=settings.sandbox_memory_mb * MiB,
        nice=settings.sandbox_nice,
    )


# Names the sandbox may inherit from the host (values copied when set there).
PASSTHROUGH_ENV = ("LANG", "LC_ALL", "TERM", "NODE_ENV", "CI", "TZ")
# Python neither writes nor reads bytecode caches in the view: a `__pycache__/*.pyc` there
# is never run instead of the reviewed `.py` (the prefix is on the sandbox's private /tmp).
PYCACHE_PREFIX = "/tmp/pycache"
DEFAULT_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONPYCACHEPREFIX": PYCACHE_PREFIX,
    "LANG": "C.UTF-8",
    "TERM": "dumb",
    "CI": "true",
    "TZ": "UTC",
}
_SECRET_NAME = re.compile(
    r"^(ANTHROPIC_|DEVLOOP_|REDIS|CELERY|AWS_|OPENAI_)"
    r"|(_KEY|_TOKEN|_SECRET|_URL|_PASSWORD|_PASS|_CREDENTIALS)$",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True for environment names that may carry credentials or service addresses."""
    return bool(_SECRET_NAME.search(name))


def sandbox_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The whole environment of a sandboxed command: an allowlist, never the host's."""
    env = dict(DEFAULT_ENV)
    env.update({k: os.environ[k] for k in PASSTHROUGH_ENV if k in os.environ})
    for name, value in (extra or {}).items():
        if is_secret_name(name) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(
                f"sandbox env: {name!r} is not allowed in a sandbox (it looks like a "
                "credential, service address or DevLoop setting); pass it some other way"
            )
        env[name] = value
    return env


def refusal(message: str) -> Observation:
    """The observation of a command refused before any process started."""
    return Observation(
        exit_code=REFUSED_EXIT, stdout="", stderr=message, duration_ms=0, refused=message
    )


def in_view(root: Dir, rel: str, what: str) -> str:
    """`rel` checked beneath the view's handle: relative, no `..`, no symlink on its way.

    A command may leave a symlink in a writable dir; a later run must not follow it
    out of its write set (or onto another file of the view) while preparing binds.
    """
    pure = PurePosixPath(rel)
    if not rel or pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"sandbox {what}: {rel!r} must be a relative path inside the view")
    try:
        st = root.lstat(rel)
    except OSError as exc:
        raise ValueError(f"sandbox {what}: {rel!r}: {exc}") from None
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise ValueError(f"sandbox {what}: {rel!r} is a symlink")
    return str(pure)


def is_dir_spec(rel: str) -> bool:
    """Whether a writable path that does not exist yet is a directory.

    A trailing slash says directory; otherwise a name with a suffix (`contract.json`,
    `coder.log`) is a file and anything else (`code`, `runs/run-1`) a directory.
    """
    return rel.endswith("/") or not PurePosixPath(rel).suffix


def prepare_writable(
    root: Dir, writable: Sequence[str], owner: tuple[int, int] | None
) -> list[str]:
    """Create missing writable paths in the view and hand them to `owner` (uid, gid).

    Missing files are created empty: the workspace layer treats an empty placeholder
    as absent. Returns the paths relative to the view, parents first.
    """
    out: list[str] = []
    for rel in sorted(writable, key=lambda r: len(PurePosixPath(r).parts)):
        rel = in_view(root, rel, "writable")
        if not root.exists(rel):
            if is_dir_spec(rel):
                root.mkdirs(rel)
            else:
                parent = str(PurePosixPath(rel).parent)
                if parent != ".":
                    root.mkdirs(parent)
                root.create_empty(rel)
        if owner is not None:
            chown_tree(root, rel, *owner)
        out.append(rel)
    return out


# chown_tree reads at most this many entries: a write set holds at most the unit's files
# (DEVLOOP_UNIT_MAX_FILES) from the host, and what a command made is its uid's already.
CHOWN_LIMITS = WalkLimits(entries=100_000, depth=64, path_bytes=4000)


def chown_tree(root: Dir, rel: str, uid: int, gid: int) -> None:
    """Give root/rel and what is under it to uid:gid, never following a symlink."""
    st = root.lstat(rel)
    if st is None:
        return
    if (st.st_uid, st.st_gid) != (uid, gid):
        root.lchown(rel, uid, gid)
    if not stat.S_ISDIR(st.st_mode):
        return
    try:
        for entry in walk(root, rel, CHOWN_LIMITS):
            if entry.problem is None:
                root.lchown(f"{rel}/{entry.rel}", uid, gid)
    except TooMany:
        pass  # the rest was made by the command itself, as uid


def sandbox_path(dest: str) -> PurePosixPath:
    """An in-sandbox path; relative ones are relative to the view's mount point."""
    path = PurePosixPath(dest)
    if ".." in path.parts:
        raise ValueError(f"sandbox path {dest!r} must not contain '..'")
    return path if path.is_absolute() else SANDBOX_ROOT / path


def view_relative(dest: PurePosixPath) -> str | None:
    """The view-relative form of an in-sandbox path, or None when outside the view."""
    if dest == SANDBOX_ROOT or not dest.is_relative_to(SANDBOX_ROOT):
        return None
    return str(dest.relative_to(SANDBOX_ROOT))


def reachable_by(path: Path, uid: int, gid: int) -> Path | None:
    """The first directory on `path` (itself included) that uid:gid cannot enter, if any."""
    if uid == 0:
        return None
    for directory in [*reversed(path.parents), path]:
        st = directory.stat()
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & bit:
            return directory
    return None


def new_view_dir(settings: Settings, prefix: str = "view-") -> Path:
    """A fresh, locked scratch dir for a view (see devloop.sandbox.viewdir.make_view)."""
    return make_view(settings, prefix)
