"""Views: locked while their maker lives, swept once it is gone, removed whatever they hold."""

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

from devloop.core.config import Settings
from devloop.sandbox.viewdir import DEAD_AFTER_S, make_view, remove_view, sweep, views_root

# A child that makes a view, prints its path and waits to be killed.
MAKER = (
    "import sys, time\n"
    "from devloop.core.config import load_settings\n"
    "from devloop.sandbox.viewdir import make_view\n"
    "print(make_view(load_settings(), 'child-'), flush=True)\n"
    "time.sleep(600)\n"
)
WAIT_S = 60


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    """Child processes of the test, killed and reaped whatever happens."""
    procs: list[subprocess.Popen[str]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait(WAIT_S)


def view_maker(children: list[subprocess.Popen[str]]) -> tuple[subprocess.Popen[str], Path]:
    """A live child holding a view; returns it and its view."""
    proc = subprocess.Popen(
        [sys.executable, "-c", MAKER], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    children.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line, "the child made no view"
    return proc, Path(line)


def age(view: Path, seconds: float) -> None:
    """Make a view look `seconds` old (its maker may be gone or alive)."""
    then = time.time() - seconds
    os.utime(view, (then, then))


def test_a_sigkilled_makers_view_is_swept_by_the_next_view_made(
    settings: Settings, children: list[subprocess.Popen[str]]
) -> None:
    dead, dead_view = view_maker(children)
    alive, live_view = view_maker(children)
    (dead_view / "units/u/code").mkdir(parents=True)
    (dead_view / "units/u/code/a.js").write_text("left behind")
    dead.send_signal(signal.SIGKILL)
    dead.wait(WAIT_S)
    age(dead_view, DEAD_AFTER_S + 5)
    age(live_view, DEAD_AFTER_S + 5)
    # A fresh process (its first view sweeps at once) makes a view, as a worker would.
    _, fresh_view = view_maker(children)
    assert not dead_view.exists()
    assert live_view.is_dir() and fresh_view.is_dir()  # their makers hold their locks
    for proc in children:
        proc.kill()
        proc.wait(WAIT_S)
    swept = set(sweep(views_root(settings), dead_after_s=0))
    assert {live_view.name, fresh_view.name} <= swept
    assert not live_view.exists() and not fresh_view.exists()


def test_a_young_unlocked_view_is_left_alone(settings: Settings) -> None:
    """Its maker may not hold the lock yet: only views older than DEAD_AFTER_S go."""
    views = views_root(settings)
    young = views / "unlocked-young.view"
    young.mkdir()
    try:
        assert young.name not in sweep(views)
        assert young.is_dir()
        age(young, DEAD_AFTER_S + 5)
        assert young.name in sweep(views)
        assert not young.exists()
    finally:
        if young.exists():
            young.rmdir()


def test_this_process_never_sweeps_its_own_views(settings: Settings) -> None:
    view = make_view(settings, "own-")
    try:
        age(view, DEAD_AFTER_S + 5)
        assert view.name not in sweep(views_root(settings), dead_after_s=0)
        assert view.is_dir()
    finally:
        remove_view(view)
    assert not view.exists()


def test_a_view_is_removed_whatever_was_left_in_it(settings: Settings) -> None:
    view = make_view(settings, "hostile-")
    deep = os.open(view, os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("d", dir_fd=deep)
        inner = os.open("d", os.O_RDONLY, dir_fd=deep)
        os.close(deep)
        deep = inner
    os.close(deep)
    os.mkfifo(view / "pipe")
    (view / "locked").mkdir()
    (view / "locked/f").write_text("x")
    (view / "locked").chmod(0o000)
    (view / "link").symlink_to("/etc")
    remove_view(view)
    assert not view.exists()
    assert Path("/etc/passwd").exists()


def test_a_view_stays_in_the_views_dir_whatever_its_prefix_holds(settings: Settings) -> None:
    view = make_view(settings, "coder-../../../escaped/x-")
    try:
        assert view.parent == views_root(settings)
        assert view.name.startswith("coder-_________escaped_x-")
    finally:
        remove_view(view)


# A process of another identity trying to reach a live view: prints what it managed. A
# shell, not this interpreter, which may sit under a home that identity cannot enter.
INTRUDER = (
    'ls "$1" >/dev/null 2>&1 && echo list; cat "$1/units.json" >/dev/null 2>&1 && echo read; '
    '(echo x > "$2/x.py") 2>/dev/null && echo write; true'
)


@pytest.mark.skipif(os.geteuid() != 0, reason="playing other local users needs root")
@pytest.mark.parametrize(("who", "uid", "gid"), [("another user", 12345, 12345),
                                                ("a nobody process", 65534, 65534)])
def test_no_other_local_user_or_nobody_process_can_list_read_or_write_a_live_view(
    settings: Settings, who: str, uid: int, gid: int
) -> None:
    from devloop.safe.safedir import Dir
    from devloop.sandbox.base import prepare_writable

    view = make_view(settings, "private-")
    try:
        with Dir.open(view) as root:
            root.write_atomic("units.json", b"{}", 0o644)
            # The write set belongs to the sandbox uid, which nobody processes share.
            [code] = prepare_writable(root, ["units/u/code"], (settings.sandbox_uid,
                                                               settings.sandbox_gid))
        # Its name is no secret: bubblewrap's arguments show it in `ps`.
        tried = subprocess.run(
            ["/bin/sh", "-c", INTRUDER, "intruder", str(view), str(view / code)],
            user=uid, group=gid, extra_groups=[], capture_output=True, text=True, timeout=60,
        )
        assert tried.returncode == 0, tried.stderr
        assert tried.stdout.split() == [], f"{who} could {tried.stdout.split()}"
        assert stat.S_IMODE(views_root(settings).stat().st_mode) == 0o710
    finally:
        remove_view(view)


def test_a_views_dir_of_another_user_is_refused(settings: Settings, tmp_path: Path) -> None:
    from devloop.safe.private import NotPrivate

    theirs = tmp_path / "views"
    theirs.mkdir()
    os.chown(theirs, 12345, 12345)
    other = settings.model_copy(update={"views_dir": theirs})
    with pytest.raises(NotPrivate, match="belongs to uid 12345"):
        views_root(other)
