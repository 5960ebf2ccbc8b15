"""Limits on a sandboxed command as a whole, and the syscalls it may not make (issue 26, 6-7).

Memory and processes are capped per command in cgroups where the host allows (root here),
processes also by RLIMIT_NPROC inside the sandbox's own user namespace, which holds for a
non-root worker (played by a forked child as uid 4242); the seccomp filter is tried call by
call from inside the sandbox.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.sandbox import BwrapSandbox, Limits, new_view_dir
from devloop.sandbox.base import MiB, sandbox_env
from devloop.sandbox.cgroups import v1_parent, where_caps_hold
from devloop.sandbox.meter import group_parent, sweep_stale
from devloop.sandbox.process import run_process
from devloop.sandbox.syscalls import filter_bpf
from tests.as_user import run_as, worker_cache, worker_uid
from tests.conftest import REPO

PY = "/usr/bin/python3"  # Debian's: world-readable, for every uid
WORKER = worker_uid()  # a non-root worker: uid 4242 played by a root test
# Forks children that sleep until it has `tries` of them or a fork fails; prints how many.
FORKER = (
    "import os, sys, time\n"
    "n = 0\n"
    "for _ in range(int(sys.argv[1])):\n"
    "    try:\n"
    "        pid = os.fork()\n"
    "    except OSError:\n"
    "        break\n"
    "    if pid == 0:\n"
    "        time.sleep(60)\n"
    "        os._exit(0)\n"
    "    n += 1\n"
    "print(n, flush=True)\n"
)
# n processes holding `each` MiB of written memory each, then "survived" if none was killed.
HOLDERS = (
    "for i in $(seq {n}); do {py} -c 'import time; b = bytearray({each} * 2**20); "
    "time.sleep({hold})' & done; wait; echo survived"
)


@pytest.fixture(scope="module")
def settings() -> Iterator[Settings]:
    """A private, world-readable cache dir (never under /root or tmp_path)."""
    cache = Path(tempfile.mkdtemp(prefix="devloop-test-", dir="/var/tmp"))
    cache.chmod(0o755)
    yield Settings(cache_dir=cache, command_timeout_s=30)
    shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture
def view(settings: Settings) -> Iterator[Path]:
    root = new_view_dir(settings, prefix="limits-")
    (root / "forker.py").write_text(FORKER)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def uid_tasks(uid: int) -> list[Path]:
    """Every task (process or thread) on the host whose real uid is `uid`: what the kernel
    counts against RLIMIT_NPROC outside any user namespace."""
    found = []
    for status in Path("/proc").glob("[0-9]*/task/[0-9]*/status"):
        try:
            line = next(ln for ln in status.read_text().splitlines() if ln.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(line.split()[1]) == uid:
            found.append(status.parent)
    return found


cgroup_memory = pytest.mark.skipif(
    not where_caps_hold().memory, reason="no memory cgroup to write here (not root)"
)
cgroup_pids = pytest.mark.skipif(
    not where_caps_hold().processes, reason="no pids cgroup to write here (not root)"
)


@cgroup_memory
@pytest.mark.timeout(120)
def test_a_command_holding_more_than_its_memory_cap_across_processes_is_killed_whole(
    settings: Settings, view: Path
) -> None:
    # Eight processes of 64 MiB: each far under RLIMIT_DATA (4 GiB), 512 MiB together.
    sandbox = BwrapSandbox(settings, Limits(memory_bytes=256 * MiB))
    started = time.monotonic()
    obs = sandbox.run(HOLDERS.format(n=8, each=64, hold=15, py=PY), view=view, cwd="",
                      writable=[], timeout_s=25)
    assert obs.limit == "memory" and obs.timed_out and obs.exit_code == 137, obs
    assert "survived" not in obs.stdout
    assert time.monotonic() - started < 15  # killed at the cap, not at the end
    # The same cap holds a command that fits: two of them, 128 MiB together.
    fits = sandbox.run(HOLDERS.format(n=2, each=64, hold=0, py=PY), view=view, cwd="",
                       writable=[], timeout_s=25)
    assert fits.exit_code == 0 and fits.stdout == "survived\n" and fits.limit is None, fits


@cgroup_pids
@pytest.mark.timeout(60)
def test_a_commands_processes_are_capped_by_its_own_pids_cgroup(view: Path) -> None:
    # Run as root, which RLIMIT_NPROC never binds: the cgroup alone holds the command.
    obs = run_process(
        [PY, str(view / "forker.py"), "200"], env=sandbox_env(), cwd="/", timeout_s=30,
        output_cap=4096, preexec=lambda: None, caps=Limits(processes=32),
    )
    forked = int(obs.stdout)
    assert 16 <= forked < 32, obs  # the forker itself is one of the 32


@pytest.mark.timeout(120)
def test_a_non_root_workers_sandbox_holds_a_fork_bomb_to_its_own_process_limit(
    settings: Settings,
) -> None:
    # The worker's uid already runs 100 processes, more than the sandbox's limit of 64: a
    # limit counted per uid would stop the sandbox from starting, and no limit at all (what
    # a non-root worker had) lets the bomb run to the guard below.
    cache, bwrap = worker_cache(WORKER)
    filter_bpf()  # built here: the child may not reach the venv to load it

    def as_worker() -> dict[str, object]:
        # A guard for the machine, were the sandbox's limit missing: room for the sleepers
        # and 250 more processes of this uid, whatever it runs already.
        guard = len(uid_tasks(os.getuid())) + 100 + 250
        hard = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        if hard != resource.RLIM_INFINITY:
            guard = min(guard, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (guard, guard))
        sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(100)]
        try:
            mine = Settings(cache_dir=cache, views_dir=cache / "views", bwrap=bwrap,
                        command_timeout_s=30)
            sandbox = BwrapSandbox(mine, Limits(processes=64))
            root = new_view_dir(mine, prefix="bomb-")
            (root / "forker.py").write_text(FORKER)
            obs = sandbox.run(f"{PY} forker.py 200", view=root, cwd="", writable=[],
                              timeout_s=20)
            limit = sandbox.run("grep 'Max processes' /proc/self/limits", view=root,
                                cwd="", writable=[])
            return {"obs": obs.model_dump(), "limit": limit.stdout, "uid": os.getuid()}
        finally:
            for sleeper in sleepers:
                sleeper.kill()
                sleeper.wait()

    try:
        found = run_as(WORKER, as_worker, timeout_s=90)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    obs = found["obs"]
    assert found["uid"] == WORKER
    assert found["limit"].split()[2:4] == ["64", "64"], found["limit"]
    assert obs["exit_code"] == 0, obs
    assert 32 <= int(obs["stdout"]) < 64, obs


@pytest.mark.timeout(60)
def test_the_seccomp_filter_denies_what_tests_never_need_and_ordinary_work_goes_on(
    settings: Settings, view: Path
) -> None:
    (view / "probe.py").write_text((REPO / "tests/sandbox_syscalls_probe.py").read_text())
    obs = BwrapSandbox(settings).run(f"{PY} probe.py", view=view, cwd="", writable=[])
    assert obs.exit_code == 0, obs
    found = json.loads(obs.stdout)
    expected = {name: "ENOSYS" if name == "clone3" else "EPERM" for name in found["denied"]}
    assert found["denied"] == expected
    assert len(found["denied"]) >= 50
    assert found["ordinary"] == {"fork": True, "thread": True, "subprocess": True,
                                 "persona": True}


@pytest.mark.timeout(60)
def test_where_the_limits_hold_is_said_by_devloop_sandbox_limits_and_in_the_log(
    settings: Settings,
) -> None:
    done = subprocess.run(
        [str(Path(sys.executable).parent / "devloop"), "sandbox", "limits"],
        capture_output=True, text=True, cwd=REPO, timeout=60,
        env={**os.environ, "DEVLOOP_CACHE_DIR": str(settings.cache_dir),
             "DEVLOOP_SANDBOX_MEMORY_MB": "3072"},
    )
    assert done.returncode == 0, done.stderr
    holding = where_caps_hold()
    memory = next(ln for ln in done.stdout.splitlines() if ln.startswith("memory per command"))
    if holding.memory:
        assert f"3072 MiB for all its processes together ({holding.memory})" in memory
    else:
        assert "no cgroup here" in memory and "RLIMIT_DATA" in memory
    assert "processes per command: 256 (RLIMIT_NPROC in its own user namespace" in done.stdout
    assert "seccomp: denied (EPERM): ptrace, process_vm_readv" in done.stdout

    # A non-root worker (no cgroup of its own to write) says once, as a warning, that only
    # the rlimits hold; the run goes on.
    def as_worker() -> list[str]:
        records: list[str] = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.levelname + " " +  # type: ignore[method-assign]
                                                     record.getMessage())
        logging.getLogger("devloop.sandbox.cgroups").addHandler(handler)
        mine = Settings(cache_dir=cache, views_dir=cache / "views", bwrap=bwrap,
                        command_timeout_s=30)
        sandbox = BwrapSandbox(mine)
        BwrapSandbox(mine)  # a second sandbox in the same process says nothing more
        root = new_view_dir(mine, prefix="log-")
        assert sandbox.run("echo ran", view=root, cwd="", writable=[]).stdout == "ran\n"
        return records

    cache, bwrap = worker_cache(WORKER)
    try:
        records = run_as(WORKER, as_worker, timeout_s=60)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    assert len(records) == 2, records
    assert records[0].startswith("WARNING sandbox limits: memory per command: no cgroup here")
    assert records[1].startswith("WARNING sandbox limits: processes per command: 256")


@cgroup_pids
def test_groups_a_killed_worker_left_behind_are_swept_and_live_ones_kept() -> None:
    parent = v1_parent("pids") or group_parent()  # cgroup v1's pids groups, else v2's
    assert parent is not None
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale, live = parent / f"run-{gone.pid}-0", parent / f"run-{os.getpid()}-999"
    stale.mkdir()
    live.mkdir()
    try:
        sweep_stale(parent)
        assert not stale.exists() and live.exists()
    finally:
        for group in (stale, live):
            if group.exists():
                group.rmdir()
