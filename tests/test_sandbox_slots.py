"""Host-wide test-run slots: no more test runs at once than there are slots."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

from devloop.sandbox.slots import run_slot


def test_a_run_waits_for_a_free_slot_and_takes_it_when_one_is_released(tmp_path: Path) -> None:
    order: list[str] = []
    held = threading.Event()
    release = threading.Event()

    def first() -> None:
        with run_slot(tmp_path, 1):
            order.append("first in")
            held.set()
            release.wait(30)
            order.append("first out")

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(30)
    waited: list[float] = []
    second = threading.Thread(target=lambda: waited.append(_take(tmp_path)))
    second.start()
    time.sleep(0.5)
    assert order == ["first in"] and not waited  # still waiting for the one slot
    release.set()
    thread.join(30)
    second.join(30)
    assert order == ["first in", "first out"] and waited and waited[0] >= 0.5


def _take(directory: Path) -> float:
    with run_slot(directory, 1) as waited:
        return waited


HOLDER = (
    "import sys, time\nfrom pathlib import Path\nfrom devloop.sandbox.slots import run_slot\n"
    "with run_slot(Path(sys.argv[1]), 1):\n    print('held', flush=True)\n    time.sleep(600)\n"
)


def test_a_slot_held_by_another_process_counts_and_its_death_frees_it(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with run_slot(tmp_path, 1, max_wait_s=0.3) as waited:
            assert waited >= 0.3  # gave up waiting: the other process holds the only slot
    finally:
        holder.kill()
        holder.wait()
    with run_slot(tmp_path, 1, max_wait_s=10) as waited:
        assert waited < 10  # the dead process's slot is free again



def test_entries_planted_as_slots_are_passed_over_and_fail_no_run(tmp_path: Path) -> None:
    slots = tmp_path / "slots"
    slots.mkdir(mode=0o1777)
    (slots / "test-0").mkdir()
    os.mkfifo(slots / "test-1")
    (slots / "test-2").symlink_to(tmp_path / "elsewhere")
    with run_slot(tmp_path, 4, max_wait_s=30) as waited:
        assert waited < 5  # took test-3 at once
        assert (slots / "test-3").is_file()
    assert not (tmp_path / "elsewhere").exists()
    with run_slot(tmp_path, 3, max_wait_s=600) as waited:
        assert waited < 5  # none usable: goes ahead at once rather than wait 600 s


def test_slots_are_this_users_alone(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)  # a cache dir others may enter: the slots must still be ours
    with run_slot(tmp_path, 1):
        pass
    assert stat.S_IMODE((tmp_path / "slots").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "slots/test-0").stat().st_mode) == 0o600
    if os.geteuid() == 0:
        # Another local user can neither reach the slot files nor hold their locks.
        tried = subprocess.run(
            ["/bin/sh", "-c", 'exec 3<"$1" && echo opened', "other",
             str(tmp_path / "slots/test-0")],
            user=12345, group=12345, extra_groups=[], capture_output=True, text=True, timeout=60)
        assert "opened" not in tried.stdout
