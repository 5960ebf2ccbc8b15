"""The directory handle: nothing outside it is reachable, no link is followed, no fifo blocks.

Every attack runs against both ways of resolving a path: the kernel's (openat2 with
RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) and the component-by-component fallback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devloop.safe.safedir import Dir, Refused, kernel_resolves
from devloop.safe.safetree import Limits, TooMany, remove_tree, walk

# A call that blocks on a fifo never returns; this is far longer than any call needs.
BLOCK_S = 30


@pytest.fixture(params=[True, False], ids=["openat2", "components"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Dir]:
    """A handle on a fresh dir, resolving with openat2 or component by component."""
    if request.param and not kernel_resolves():
        pytest.skip("this kernel has no openat2")
    (tmp_path / "view").mkdir()
    with Dir.open(tmp_path / "view", kernel=request.param) as handle:
        yield handle


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host dir outside the view, holding a file a session would like to read or replace."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "secret").write_text("host secret\n")
    return outside


def view_of(root: Dir) -> Path:
    return Path(root.name)


def finishes(call: Callable[[], Any]) -> Any:
    """call() in a thread; fails the test if it blocks (a fifo opened for blocking I/O)."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BLOCK_S)
    assert not thread.is_alive(), "the call blocked"
    return outcome[0]


def test_openat2_is_used_where_the_kernel_has_it() -> None:
    release = tuple(int(n) for n in os.uname().release.split("-")[0].split(".")[:2])
    has_it = release >= (5, 6) and os.uname().machine in ("x86_64", "aarch64")
    assert kernel_resolves() is has_it


def test_reads_refuse_links_escapes_and_absolute_paths(root: Dir, host: Path) -> None:
    view = view_of(root)
    (view / "code").mkdir()
    (view / "code/leak.js").symlink_to(host / "secret")
    (view / "code/out").symlink_to(host)
    (view / "code/inside.js").symlink_to("../units.json")
    (view / "units.json").write_text("{}")
    cases = {
        "code/leak.js": "is a symlink",
        "code/inside.js": "is a symlink",
        "code/out/secret": "passes through a symlink (code/out)",
        "../host/secret": "escapes the directory (..)",
        str(host / "secret"): "is absolute",
    }
    for rel, reason in cases.items():
        with pytest.raises(Refused) as caught:
            root.read_bytes(rel)
        assert caught.value.path == rel and reason in caught.value.reason
    assert root.read_text("units.json") == "{}"


def test_a_fifo_is_refused_at_once_for_reading_and_writing(root: Dir) -> None:
    os.mkfifo(view_of(root) / "pipe")
    read = finishes(lambda: root.read_bytes("pipe"))
    assert isinstance(read, Refused) and read.reason == "is a fifo, not a regular file"
    write = finishes(lambda: root.write_atomic("pipe", "x"))
    assert isinstance(write, Refused) and "is a fifo" in write.reason
    assert os.path.exists(view_of(root) / "pipe")  # refused, not replaced


def test_writes_never_go_through_a_planted_link(root: Dir, host: Path) -> None:
    view = view_of(root)
    (view / "code").mkdir()
    (view / "code/out").symlink_to(host)
    (view / "code/x.js").symlink_to(host / "secret")
    (view / "code/new.js").symlink_to(host / "created-by-the-worker")
    for rel in ("code/out/a.js", "code/out/deeper/a.js", "code/x.js", "code/new.js"):
        with pytest.raises(Refused):
            root.write_atomic(rel, "pwned")
    with pytest.raises(Refused):
        root.mkdirs("code/out/d")
    root.create_empty("code/new.js")  # O_EXCL: something is there, so nothing is made
    assert sorted(p.name for p in host.iterdir()) == ["secret"]
    assert (host / "secret").read_text() == "host secret\n"


def test_replacing_a_planted_link_or_fifo_writes_the_view_only(root: Dir, host: Path) -> None:
    view = view_of(root)
    (view / "run").mkdir()
    (view / "run/config.mjs").symlink_to(host / "secret")
    os.mkfifo(view / "run/setup.mjs")
    (view / "run/check.cjs").mkdir()
    (view / "run/check.cjs/x").write_text("x")
    for name in ("config.mjs", "setup.mjs", "check.cjs"):
        finishes(lambda name=name: root.write_atomic(f"run/{name}", "ours", replace=True))
        assert root.read_text(f"run/{name}") == "ours"
    assert (host / "secret").read_text() == "host secret\n"
    assert sorted(p.name for p in (view / "run").iterdir()) == [
        "check.cjs",
        "config.mjs",
        "setup.mjs",
    ]


def test_temporaries_are_fresh_names_created_exclusively(root: Dir, host: Path) -> None:
    view = view_of(root)
    (view / "code").mkdir()
    # The name the Write tool used to write through before renaming.
    (view / "code/.x.js.tmp").symlink_to(host / "planted")
    root.write_atomic("code/x.js", "fine")
    assert root.read_text("code/x.js") == "fine"
    assert not (host / "planted").exists()
    assert sorted(p.name for p in (view / "code").iterdir()) == [".x.js.tmp", "x.js"]


def test_chmod_and_lchown_never_touch_a_links_target(root: Dir, host: Path) -> None:
    view = view_of(root)
    (view / "link").symlink_to(host / "secret")
    before = os.stat(host / "secret")
    with pytest.raises(Refused):
        root.chmod("link", 0o777)
    root.lchown("link", 65534, 65534)
    after = os.stat(host / "secret")
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)
    assert os.lstat(view / "link").st_uid == 65534


def test_the_walk_names_kinds_and_never_follows_links(root: Dir, host: Path) -> None:
    view = view_of(root)
    (view / "a/b").mkdir(parents=True)
    (view / "a/b/f.txt").write_text("f")
    (view / "a/out").symlink_to(host)
    os.mkfifo(view / "a/pipe")
    entries = {e.rel: e.kind for e in walk(root)}
    assert entries == {
        "a": "dir",
        "a/b": "dir",
        "a/b/f.txt": "file",
        "a/out": "symlink",
        "a/pipe": "other",
    }


def test_the_walk_reports_bad_names_depth_and_length_and_stops_at_the_entry_cap(
    root: Dir,
) -> None:
    view = view_of(root)
    os.mkdir(os.fsencode(view) + b"/bad-\xff-name")
    (view / "new\nline.js").write_text("x")
    (view / "d1/d2/d3/d4").mkdir(parents=True)
    (view / "d1/d2/d3/d4/deep.js").write_text("x")
    (view / ("long" * 20)).write_text("x")
    limits = Limits(entries=50, depth=3, path_bytes=64)
    problems = {e.rel: e.problem for e in walk(root, "", limits) if e.problem}
    assert problems == {
        "bad-\\xff-name": "name is not valid UTF-8",
        "new\\nline.js": "name contains control characters",
        "d1/d2/d3": "is more than 3 levels deep",
        "long" * 20: "path is longer than 64 bytes",
    }
    for i in range(60):
        (view / f"f{i}").touch()
    with pytest.raises(TooMany, match="holds more than 50 entries"):
        list(walk(root, "", Limits(entries=50)))


def test_remove_tree_removes_a_tree_deeper_than_the_recursion_limit(root: Dir) -> None:
    fd = os.open(view_of(root), os.O_RDONLY)
    for _ in range(max(1100, sys.getrecursionlimit() + 100)):
        os.mkdir("d", dir_fd=fd)
        deeper = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = deeper
    os.close(fd)
    assert [e.problem for e in walk(root) if e.problem] == ["is more than 32 levels deep"]
    remove_tree(root, "d")
    assert os.listdir(view_of(root)) == []


@pytest.fixture
def public_dir() -> Iterator[Path]:
    """A dir every uid can enter (pytest's tmp_path is 0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="devloop-test-", dir="/var/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_remove_tree_copes_with_dirs_their_owner_made_unusable(public_dir: Path) -> None:
    """Run as the sandbox uid (a non-root worker meets its own sandbox's dirs this way)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another uid")
    tree = public_dir
    (tree / "t/locked/inner").mkdir(parents=True)
    (tree / "t/locked/inner/f").write_text("x")
    (tree / "t/readonly").mkdir()
    (tree / "t/readonly/g").write_text("x")
    for path in [tree / "t", *(tree / "t").rglob("*")]:
        os.lchown(path, 65534, 65534)
    (tree / "t/locked/inner").chmod(0o000)
    (tree / "t/locked").chmod(0o000)
    (tree / "t/readonly").chmod(0o555)
    source = Path(__file__).resolve().parent.parent / "devloop"
    staged = tree / "code"  # the package, where uid 65534 can read it
    shutil.copytree(source, staged / "devloop", ignore=shutil.ignore_patterns("__pycache__"))
    (staged / "devloop/__init__.py").write_text("")
    script = (
        "from devloop.safe.safedir import Dir\n"
        "from devloop.safe.safetree import remove_tree\n"
        f"remove_tree(Dir.open({str(tree)!r}), 't')\n"
    )
    done = subprocess.run(
        ["/usr/bin/python3", "-c", script],
        env={"PYTHONPATH": str(staged), "PATH": "/usr/bin:/bin"},
        user=65534,
        group=65534,
        capture_output=True,
        text=True,
        timeout=BLOCK_S,
    )
    assert done.returncode == 0, done.stderr
    assert not (tree / "t").exists()
