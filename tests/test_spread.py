"""How the suite spreads over xdist workers (tests/spread.py) holds in a real `pytest -n 3`:
a group runs on one worker, and the `alone` group is handed out last (its worker has run every
other test it was given when it starts them) and runs back to back once every worker has run
out of other tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The command line is the test's own: none of the caller's PYTEST_ADDOPTS, its path kept.
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
       "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
LOGGED = """\
import os
import pathlib

import pytest

LOG = pathlib.Path(__file__).parent / "ran.log"


def note(name):
    with LOG.open("a") as log:
        log.write(f"{os.environ['PYTEST_XDIST_WORKER']} {name}\\n")


def held(name):
    note(f"{name} starts")
    __import__("time").sleep(0.2)
    note(f"{name} ends")
"""


@pytest.mark.timeout(180)
def test_the_alone_group_runs_on_one_worker_after_its_other_tests(tmp_path: Path) -> None:
    # Seen: pytest 9.2 with xdist 3.8 dropped every group without a word (pytest-xdist#1386).
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.spread"]\n')
    for name in ("a", "b"):
        (tmp_path / f"test_alone_{name}.py").write_text(LOGGED + "".join(
            f"\n\n@pytest.mark.alone\ndef test_{name}{i}():\n    held('alone {name}{i}')\n"
            for i in range(2)))
    # Plain tests in groups of six: when the alone group is handed out, the other workers
    # still have tests of theirs waiting.
    (tmp_path / "test_plain.py").write_text(LOGGED + "".join(
        f"\n\n@pytest.mark.xdist_group('g{i // 6}')\ndef test_plain{i}():\n"
        f"    held('plain {i}')\n" for i in range(24)))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup",
         "--no-loadscope-reorder", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=ENV,
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [line.split(" ", 1) for line in (tmp_path / "ran.log").read_text().splitlines()]
    alone = [(worker, name) for worker, name in ran if name.startswith("alone")]
    assert len(alone) == 8 and len({worker for worker, _ in alone}) == 1, ran
    # Handed out last: on its worker nothing follows them.
    mine = [name for worker, name in ran if worker == alone[0][0]]
    assert all(name.startswith("alone") for name in mine[-8:]), ran
    assert len({worker for worker, name in ran if name.startswith("plain")}) > 1, ran
    # Last everywhere, back to back: from the first alone test's start on, no other test
    # starts or ends on any worker.
    names = [name for _, name in ran]
    assert all(name.startswith("alone") for name in names[names.index(alone[0][1]):]), ran
