"""How the suite spreads over xdist workers (tests/spread.py) holds in a real `pytest -n 3`:
a group runs on one worker, and the `alone` group is handed out last (its worker has run every
other test it was given when it starts them)."""

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
"""


@pytest.mark.timeout(180)
def test_the_alone_group_runs_on_one_worker_after_its_other_tests(tmp_path: Path) -> None:
    # Seen: pytest 9.2 with xdist 3.8 dropped every group without a word (pytest-xdist#1386).
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.spread"]\n')
    for name in ("a", "b"):
        (tmp_path / f"test_alone_{name}.py").write_text(LOGGED + "".join(
            f"\n\n@pytest.mark.alone\ndef test_{name}{i}():\n    note('alone {name}{i}')\n"
            for i in range(2)))
    (tmp_path / "test_plain.py").write_text(LOGGED + "".join(
        f"\n\ndef test_plain{i}():\n    note('plain {i}')\n    __import__('time').sleep(0.2)\n"
        for i in range(9)))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup",
         "--no-loadscope-reorder", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, env=ENV,
        capture_output=True, text=True, timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    ran = [line.split(" ", 1) for line in (tmp_path / "ran.log").read_text().splitlines()]
    alone = [(worker, name) for worker, name in ran if name.startswith("alone")]
    assert len(alone) == 4 and len({worker for worker, _ in alone}) == 1, ran
    # Handed out last: on its worker nothing follows them (on another, a test handed out
    # before them may still wait for its turn behind them: that is the lock's doing).
    mine = [name for worker, name in ran if worker == alone[0][0]]
    assert all(name.startswith("alone") for name in mine[-4:]), ran
    assert len({worker for worker, name in ran if name.startswith("plain")}) > 1, ran
