"""Host-wide test-run slots: no more test runs at once than there are slots."""

from __future__ import annotations

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

