"""The sandbox accounts each command's CPU and CPU wait, and weighs sandboxes as one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.sandbox import BwrapSandbox, Observation, new_view_dir
from devloop.sandbox.weight import GROUP, V1_CPU

SPIN = (
    "python3 -c 'import time\nend = time.thread_time() + 0.6\n"
    "while time.thread_time() < end: pass'"
)


@pytest.fixture
def view(settings: Settings) -> Iterator[Path]:
    made = new_view_dir(settings, prefix="meter-test-")
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def test_a_command_reports_the_cpu_its_processes_used_and_how_it_was_measured(
    settings: Settings, view: Path
) -> None:
    sandbox = BwrapSandbox(settings)
    obs = sandbox.run(f"{SPIN} & {SPIN}; wait", view=view, cwd=".", writable=[])
    assert obs.exit_code == 0, obs.stderr
    assert obs.cpu_s >= 1.0  # both children, the one in the background included
    assert obs.meter == ("cgroup" if os.geteuid() == 0 else "proc")
    assert 0 <= obs.wait_s <= obs.duration_ms / 1000
    idle = sandbox.run("sleep 1", view=view, cwd=".", writable=[])
    assert idle.cpu_s < 0.5 and idle.duration_ms >= 1000


@pytest.mark.skipif(
    os.geteuid() != 0 or not (V1_CPU / "cpu.shares").exists(),
    reason="the shared cpu cgroup needs root and a mounted cpu controller",
)
def test_every_sandboxed_process_joins_the_hosts_one_weighted_cpu_group(
    settings: Settings, view: Path
) -> None:
    sandbox = BwrapSandbox(settings)
    token = "sleep 3.0417"  # a command line no other process has
    done: list[Observation] = []
    thread = threading.Thread(
        target=lambda: done.append(
            sandbox.run(token, view=view, cwd=".", writable=[])
        )
    )
    thread.start()
    try:
        pid = ""
        deadline = time.monotonic() + 10
        while not pid and time.monotonic() < deadline:
            pid = subprocess.run(["pgrep", "-f", f"^{token}$"], capture_output=True,
                                 text=True).stdout.split("\n")[0]
            time.sleep(0.05)
        groups = Path(f"/proc/{pid}/cgroup").read_text()
    finally:
        thread.join(30)
    assert re.search(rf"^\d+:cpu(,cpuacct)?:/{GROUP}$", groups, re.M), groups
    assert (V1_CPU / GROUP / "cpu.shares").read_text().strip() == str(
        settings.sandbox_cpu_shares
    )
    assert done and done[0].exit_code == 0
