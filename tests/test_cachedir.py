"""The cache dir is used only when no one but its owner controls it (issue 26, item 1).

Another local user is played by uid 4242 through `setpriv` (root only): she makes the
cache dir first in world-writable /var/tmp, plants the toolchain lock as a link to a
root-only file, and her own verdict plugin.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.project.toolchain import python_toolchain
from devloop.runners.channel import FILES, HERE, plugin_dir
from devloop.safe.cachedir import (
    ROOT_DEFAULT,
    CacheUntrusted,
    default_cache_dir,
    ensure_public_dir,
    trusted_cache,
)
from tests.proctree import run_bounded
from tests.workers.runproc import DEVLOOP, clean_env

THEM = 4242  # another local user (not 65534, the sandbox's)
AS_THEM = ["setpriv", f"--reuid={THEM}", f"--regid={THEM}", "--clear-groups"]
SECRET = b"root's only copy\n"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="plays another uid: needs root")


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A dir of ours in /var/tmp (a sticky dir of root's, as a shared host has)."""
    path = Path(tempfile.mkdtemp(prefix="devloop-test-cache-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def victim() -> Iterator[Path]:
    """A root-only 0600 file that a planted link points at."""
    home = Path(tempfile.mkdtemp(prefix="devloop-test-victim-"))
    path = home / "secret"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    yield path
    shutil.rmtree(home, ignore_errors=True)


def as_them(*argv: str) -> None:
    """Run argv as the other user."""
    subprocess.run([*AS_THEM, *argv], check=True, timeout=30)


def toolchain_lock_name() -> str:
    """The python toolchain's lock file name (as devloop.project.toolchain makes it)."""
    from devloop.project.toolchain import python_toolchain_name

    return f".{python_toolchain_name()}.lock"


@root_only
@pytest.mark.timeout(120)
def test_a_cache_dir_another_user_made_first_is_refused_with_exit_2_and_nothing_followed(
    victim: Path, todo_project: Path
) -> None:
    cache = Path(f"/var/tmp/devloop-test-theirs-{os.getpid()}")
    try:
        # She makes it first (as she did with /var/tmp/devloop), with a lock link and a plugin.
        as_them("mkdir", "-p", str(cache / "toolchains"), str(cache / "verdict" / "x"))
        as_them("ln", "-s", str(victim), str(cache / "toolchains" / toolchain_lock_name()))
        as_them("sh", "-c", f"echo 'raise SystemExit' > {cache}/verdict/x/verdict_channel.py")
        env = clean_env(DEVLOOP_CACHE_DIR=str(cache))
        for argv in ([DEVLOOP, "toolchain", "install", "python"],
                     [DEVLOOP, "run", str(todo_project), "--llm", "stub"]):
            done = run_bounded(argv, timeout=60, env=env)
            assert done.returncode == 2, (argv, done.stdout, done.stderr)
            line = done.stderr.strip()
            assert line.startswith(f"{cache}: DEVLOOP_CACHE_DIR: belongs to uid {THEM}"), line
            assert "fix: remove it" in line and "or set DEVLOOP_CACHE_DIR" in line, line
            assert len(line.splitlines()) == 1
        assert victim.read_bytes() == SECRET  # the root-only file was not truncated
        assert not os.path.lexists(todo_project / ".devloop" / "redis.sock")
    finally:
        shutil.rmtree(cache, ignore_errors=True)


@root_only
def test_a_dir_on_the_path_that_another_user_owns_or_may_write_is_refused(
    scratch: Path,
) -> None:
    theirs = scratch / "theirs"
    theirs.mkdir()
    os.chown(theirs, THEM, THEM)
    with pytest.raises(CacheUntrusted) as raised:
        trusted_cache(theirs / "cache")
    assert f"{theirs} (on its path) belongs to uid {THEM}" in str(raised.value)
    # Writable by others without the sticky bit: anyone may swap what lies under it.
    shared = scratch / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(CacheUntrusted) as raised:
        trusted_cache(shared / "cache")
    assert "(on its path) is writable by other users (mode 777)" in str(raised.value)
    # The cache dir itself writable by others: anything in it may be theirs.
    loose = scratch / "loose"
    loose.mkdir()
    loose.chmod(0o775)
    with pytest.raises(CacheUntrusted) as raised:
        trusted_cache(loose)
    assert "is writable by other users (mode 775)" in str(raised.value)
    assert f"fix: chmod go-w {loose}" in str(raised.value)


@root_only
def test_a_link_of_another_user_on_the_path_is_refused_not_followed(scratch: Path) -> None:
    ours = scratch / "ours"
    ours.mkdir(mode=0o700)
    link = scratch / "link"
    link.symlink_to(ours)
    os.lchown(link, THEM, THEM)
    with pytest.raises(CacheUntrusted) as raised:
        trusted_cache(link)
    assert f"is a link of uid {THEM}" in str(raised.value)
    # Followed, it would have made our private dir world-readable.
    assert stat.S_IMODE(ours.stat().st_mode) == 0o700
    os.lchown(link, 0, 0)  # our own link is resolved once: the real path is what is used
    assert trusted_cache(link) == ours


def test_a_private_dir_of_ours_in_a_sticky_dir_is_trusted_and_made_readable(
    scratch: Path,
) -> None:
    # /var/tmp is root's, 1777: only an entry's owner may rename or remove it.
    assert trusted_cache(scratch / "a" / "b") == scratch / "a" / "b"
    assert stat.S_IMODE((scratch / "a" / "b").stat().st_mode) == 0o755


def test_the_default_is_per_user_and_never_a_shared_sticky_dir() -> None:
    assert default_cache_dir(0, {"XDG_CACHE_HOME": "/root/.cache"}) == ROOT_DEFAULT
    assert default_cache_dir(1000, {"XDG_CACHE_HOME": "/c", "HOME": "/h"}) == Path("/c/devloop")
    assert default_cache_dir(1000, {"XDG_CACHE_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.cache/devloop")
    assert default_cache_dir(1000, {"HOME": "/h"}) == Path("/h/.cache/devloop")
    if os.geteuid() == 0:  # root's default is root's on every component, readable by all
        trusted_cache(ROOT_DEFAULT)
        for path in [ROOT_DEFAULT, *ROOT_DEFAULT.parents]:
            st = path.stat()
            assert st.st_uid == 0 and not st.st_mode & 0o022 and st.st_mode & 0o005 == 0o005


def test_a_lock_planted_as_a_link_or_fifo_is_refused_and_its_target_left_whole(
    scratch: Path, victim: Path
) -> None:
    cache = trusted_cache(scratch / "cache")
    lock = ensure_public_dir(cache / "toolchains") / toolchain_lock_name()
    lock.symlink_to(victim)
    with pytest.raises(CacheUntrusted) as raised:
        python_toolchain(cache)
    assert str(lock) in str(raised.value)
    assert victim.read_bytes() == SECRET and stat.S_IMODE(victim.stat().st_mode) == 0o600
    lock.unlink()
    os.mkfifo(lock)
    with pytest.raises(CacheUntrusted):
        python_toolchain(cache)
    assert not (cache / "toolchains" / toolchain_lock_name()[1:-5]).exists()


@pytest.mark.parametrize("plant", ["edited", "link", "extra", "theirs"])
def test_a_verdict_plugin_copy_that_is_not_the_packages_is_made_again(
    scratch: Path, victim: Path, plant: str
) -> None:
    if plant == "theirs" and os.geteuid() != 0:
        pytest.skip("plays another uid: needs root")
    cache = trusted_cache(scratch / "cache")
    copy = plugin_dir(cache)
    copy.chmod(0o755)
    target = copy / "verdict_channel.py"
    target.chmod(0o644)
    if plant == "edited":
        target.write_text(target.read_text() + "\nHOOKED = True\n")
    elif plant == "link":
        target.unlink()
        target.symlink_to(victim)
    elif plant == "extra":
        (copy / "sitecustomize.py").write_text("print('hooked')\n")
    else:
        os.chown(target, THEM, THEM)
    assert plugin_dir(cache) == copy
    assert sorted(p.name for p in copy.iterdir()) == sorted(FILES)
    for name in FILES:
        path = copy / name
        assert not path.is_symlink() and path.read_bytes() == (HERE / name).read_bytes()
        assert path.stat().st_uid == os.geteuid() and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert victim.read_bytes() == SECRET
