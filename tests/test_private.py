"""Private files: nothing planted in a project folder is followed, read as proof, or blocks."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from devloop.safe.private import (
    NotPrivate,
    make_private_dir,
    open_private_log,
    read_private,
    remove_planted,
    write_private,
)

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another uid needs root")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_write_private_replaces_a_planted_link_and_leaves_its_target(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("host file\n")
    (tmp_path / "token").symlink_to(target)
    write_private(tmp_path / "token", b"secret")
    assert target.read_text() == "host file\n"
    assert not (tmp_path / "token").is_symlink() and (tmp_path / "token").read_bytes() == b"secret"
    assert mode(tmp_path / "token") == 0o600
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_read_private_believes_only_this_users_0600_regular_file(tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    write_private(ours, b"x")
    assert read_private(ours) == b"x"
    (tmp_path / "link").symlink_to(ours)
    readable = tmp_path / "readable"
    readable.write_text("x")
    readable.chmod(0o644)
    os.mkfifo(tmp_path / "fifo", 0o600)  # opening it must not block
    for name in ("link", "readable", "fifo", "missing"):
        assert read_private(tmp_path / name) is None, name


@ROOT_ONLY
def test_read_private_ignores_another_users_file(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    write_private(theirs, b"x")
    os.chown(theirs, 65534, 65534)
    assert read_private(theirs) is None


def test_open_private_log_refuses_links_and_fifos_and_tightens_a_log(tmp_path: Path) -> None:
    (tmp_path / "link.log").symlink_to(tmp_path / "target")
    os.mkfifo(tmp_path / "fifo.log")
    for name in ("link.log", "fifo.log"):
        with pytest.raises(OSError):
            open_private_log(tmp_path / name)
    assert not (tmp_path / "target").exists()
    old = tmp_path / "old.log"
    old.write_text("kept\n")
    old.chmod(0o644)
    os.close(open_private_log(old))
    assert mode(old) == 0o600 and old.read_text() == "kept\n"


def test_make_private_dir_tightens_ours_and_refuses_a_link(tmp_path: Path) -> None:
    made = make_private_dir(tmp_path / "a" / "b")
    assert mode(made) == 0o700
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    assert mode(make_private_dir(loose)) == 0o700
    (tmp_path / "link").symlink_to(loose)
    with pytest.raises(NotPrivate, match="link"):
        make_private_dir(tmp_path / "link")


@ROOT_ONLY
def test_make_private_dir_refuses_another_users_dir(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(NotPrivate, match="belongs to uid 65534"):
        make_private_dir(theirs)
    assert mode(theirs) == 0o755


def test_remove_planted_removes_links_and_fifos_one_level_down(tmp_path: Path) -> None:
    (tmp_path / "aof").write_text("data")
    (tmp_path / "aof").chmod(0o644)
    (tmp_path / "log").symlink_to("/etc/passwd")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "sub").mkdir(mode=0o755)
    (tmp_path / "sub" / "link").symlink_to("/etc")
    removed = remove_planted(tmp_path)
    assert sorted(removed) == ["fifo", "log", "sub/link"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aof", "sub"]
    assert mode(tmp_path / "aof") == 0o600 and mode(tmp_path / "sub") == 0o700
