"""Sessions that leave hostile shapes in their view: each is a reported violation, the worker
goes on, and the view is gone afterwards."""

from __future__ import annotations

import os
import time
from pathlib import Path

from devloop.core.config import load_settings
from tests.roles.test_self_checks import Drive, call, drive, scripted_coder, todolist

__all__ = ["drive"]  # the fixture, shared with the self-check tests

MANY = "mkdir -p code/many && cd code/many && seq 1 100000 | xargs touch"
DEEP = "mkdir -p tests/" + "/".join(["d"] * 1100)
BAD_NAME = "touch \"tests/bad-$(printf '\\377').py\" && touch \"tests/ok.py\""


def views() -> set[str]:
    """The view dirs that exist now."""
    root = load_settings().views_dir
    assert root is not None  # tests/leftovers.py gives each run its own
    return set(os.listdir(root)) if root.exists() else set()


def test_a_coder_that_makes_100000_files_gets_a_violation_and_the_worker_goes_on(
    drive: Drive, inventory_project: Path
) -> None:
    before = views()
    started = time.monotonic()
    ended = drive(inventory_project, "coder", "stock-db", [todolist(1), call("Bash", command=MANY)])
    print(f"coder session with 100,000 files: {time.monotonic() - started:.1f} s")
    output = ended.output
    assert not output.ok and output.files_written == []
    assert output.sandbox_violations == [
        "units/stock-db: holds more than 2000 files and directories "
        "(DEVLOOP_UNIT_MAX_FILES): nothing of it was read or committed"
    ]
    assert views() == before  # removed, 100,000 files and all
    # The same process runs the next session as if nothing happened.
    calm = drive(inventory_project, "coder", "pricing", scripted_coder(inventory_project))
    assert calm.output.ok and calm.output.sandbox_violations == []


def test_a_tester_that_makes_bad_names_and_deep_trees_gets_violations(
    drive: Drive, inventory_project: Path
) -> None:
    before = views()
    calls = [todolist(1), call("Bash", command=f"{DEEP} && {BAD_NAME}")]
    ended = drive(inventory_project, "tester", "pricing", calls)
    output = ended.output
    assert not output.ok
    assert sorted(output.sandbox_violations) == [
        "units/pricing/tests/bad-\\xff.py: name is not valid UTF-8",
        "units/pricing/tests/" + "/".join(["d"] * 31) + ": is more than 32 levels deep",
    ]
    assert views() == before
