"""The fork server a run's workers start from: each child has its own group before its pid
is known, its own private log, and ends reported as Popen would; nothing outlives it."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.server.forker import GONE, Forker
from tests.proctree import alive, processes

SERVER = [sys.executable, str(Path(__file__).parent / "forked_sleeper.py")]
SLACK_S = 60  # the server's start on a loaded machine

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def forker(tmp_path: Path) -> Iterator[Forker]:
    handle = Forker(SERVER, dict(os.environ), tmp_path / "forker.log")
    yield handle
    handle.close()


def test_a_child_runs_its_args_with_its_own_log_and_its_exit_code_comes_back(
    forker: Forker, tmp_path: Path
) -> None:
    child = forker.start(["0.2", "7"], tmp_path / "w0.log")
    assert (tmp_path / "w0.log").exists()  # at once, as for a child run on its own
    assert child.wait(timeout=SLACK_S) == 7
    assert child.poll() == 7
    log = tmp_path / "w0.log"
    assert log.read_text() == "child 0.2 7\n"
    # The child's stray line went to the server's log, not among its answers.
    assert "a stray line from a child" in (tmp_path / "forker.log").read_text()
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_a_signal_to_its_group_sent_as_soon_as_its_pid_is_known_always_lands(
    forker: Forker, tmp_path: Path
) -> None:
    # The run's stop() signals each worker's group the moment it has its pid: a child not
    # yet in its own group would miss it and live on (seen: a worker SIGKILLed 15 s later).
    for i in range(3):
        child = forker.start(["1000", "0"], tmp_path / f"w{i}.log")
        os.killpg(child.pid, signal.SIGTERM)
        assert child.wait(timeout=SLACK_S) == -signal.SIGTERM


def test_a_killed_child_is_reported_killed_and_the_others_live_on(
    forker: Forker, tmp_path: Path
) -> None:
    first, second = (forker.start(["1000", "0"], tmp_path / f"w{i}.log") for i in range(2))
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(timeout=SLACK_S) == -signal.SIGKILL
    with pytest.raises(subprocess.TimeoutExpired):
        second.wait(timeout=0.5)
    assert alive(second.pid) and os.getpgid(second.pid) == second.pid
    assert processes()[second.pid].ppid == forker.pid  # the server's child, not ours


def test_the_servers_death_takes_its_children_and_the_next_start_brings_a_new_one(
    forker: Forker, tmp_path: Path
) -> None:
    # Killed the moment the pids are known, before the children ran a line of the server's
    # code: each must still find it gone (seen: an orphan asleep, when it read getppid()).
    children = [forker.start(["1000", "0"], tmp_path / f"w{i}.log") for i in range(2)]
    pids = [c.pid for c in children]
    server = forker.pid
    assert server is not None
    os.kill(server, signal.SIGKILL)
    while forker.pid is not None:  # dead; its reader may not have seen the end yet
        time.sleep(0.01)
    # Asked for at once: the new server's child is never taken for one of the old one's.
    again = forker.start(["0", "3"], tmp_path / "again.log")
    for child in children:
        assert child.wait(timeout=SLACK_S) == GONE
    deadline = time.monotonic() + SLACK_S
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    survivors = [pid for pid in pids if alive(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert not survivors, "a child outlived its fork server"
    assert "died with it" in (tmp_path / "w0.log").read_text()  # a crash loop quotes it
    assert again.wait(timeout=SLACK_S) == 3
    assert forker.pid not in (None, server)


def test_close_ends_the_server_and_every_child(forker: Forker, tmp_path: Path) -> None:
    child = forker.start(["1000", "0"], tmp_path / "w0.log")
    pid, server = child.pid, forker.pid
    assert server is not None
    forker.close()
    deadline = time.monotonic() + SLACK_S
    while (alive(pid) or alive(server)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid) and not alive(server)


def test_a_link_planted_as_a_childs_log_is_never_written_through(
    forker: Forker, tmp_path: Path
) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("theirs\n")
    (tmp_path / "w0.log").symlink_to(target)
    with pytest.raises(OSError):
        forker.start(["0", "0"], tmp_path / "w0.log")
    # Swapped in after the request, before the child opens it (its slow start): refused too.
    child = forker.start(["0", "0"], tmp_path / "w1.log")
    (tmp_path / "w1.log").unlink()
    (tmp_path / "w1.log").symlink_to(target)
    assert child.wait(timeout=SLACK_S) == 1
    assert target.read_text() == "theirs\n"
    assert "w1.log" in (tmp_path / "forker.log").read_text()  # why, in the server's log
