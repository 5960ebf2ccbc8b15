"""What `devloop run` and `devloop demo` write into a folder they did not create goes
through no link or fifo planted there (issue 26, item 11)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from devloop.cli.run.project_run import write_traceback
from tests.workers.test_cli_run import devloop

SECRET = "nobody else's\n"


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_runs_traceback_replaces_a_planted_log_and_never_writes_through_it(
    tmp_path: Path, kind: str
) -> None:
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    project = tmp_path / "clone"
    (project / ".devloop").mkdir(parents=True)  # as a cloned folder may ship it
    planted = project / ".devloop" / "run-error.log"
    if kind == "link":
        planted.symlink_to(victim)
    else:
        os.mkfifo(planted)
    try:
        raise RuntimeError("a bug of ours")
    except RuntimeError:
        log = write_traceback(project)
    assert log == planted.resolve()
    assert victim.read_text() == SECRET
    st = os.lstat(log)
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert "RuntimeError: a bug of ours" in log.read_text()


@pytest.mark.timeout(60)
def test_the_demo_copies_its_example_through_no_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "demo-out"
    out.symlink_to(elsewhere)  # a `demo-out` that came with a cloned folder
    done = devloop("demo", "--out-dir", str(out), cwd=tmp_path, timeout=50)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"{out}: --out-dir: is a symlink; fix:")
    assert not any(elsewhere.iterdir())
