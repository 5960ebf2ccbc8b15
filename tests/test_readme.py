"""The README's generated tables match the code they describe, every test it names exists,
and the Redis recipe it shows requires its password."""

from __future__ import annotations

import ast
import os
import re
import signal
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.config import settings_table
from devloop.redis_server import redis_executable
from devloop.roles.tooltable import tool_table
from tests.proctree import wait_for_port
from tests.redis_fixture import assert_password_required

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
# `tests/x/test_y.py`, `tests/x/test_y.py::name`, `::name` (of the last file named), `tests/x/`
FILE_REF = re.compile(r"tests/[\w/.-]+\.py(?:::\w+)?")
NAME_REF = re.compile(r"::\w+")
DIR_REF = re.compile(r"tests/[\w/-]+/")


def test_readme_lists_every_tool_per_role_as_the_registry_does() -> None:
    assert tool_table() in README


def test_readme_lists_every_setting_with_its_default() -> None:
    assert settings_table() in README


def test_readme_shows_the_two_set_up_commands() -> None:
    assert "make demo" in README and "make test" in README


def named_tests(text: str) -> list[str]:
    """Each test path the text names in backticks, `::name` made whole from the file before."""
    refs: list[str] = []
    last_file = ""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # code blocks are not prose
    for span in re.findall(r"`([^`]+)`", prose):
        if FILE_REF.fullmatch(span):
            last_file = span.partition("::")[0]
            refs.append(span)
        elif NAME_REF.fullmatch(span):
            assert last_file, f"{span} names no file before it"
            refs.append(last_file + span)
        elif DIR_REF.fullmatch(span):
            refs.append(span)
        else:
            # A path split over two lines, or one with a typo in its form, is not skipped.
            assert not re.search(r"tests/\S*\.py|^::", span.strip()), span
    return refs


def defined_names(path: Path) -> set[str]:
    """Every function and class a python file defines, at any depth."""
    tree = ast.parse(path.read_text(), filename=str(path))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in ast.walk(tree) if isinstance(node, kinds)}


def missing(refs: list[str]) -> list[str]:
    """The references whose file, or whose function or class in it, does not exist."""
    out = []
    for ref in refs:
        path, _, name = ref.partition("::")
        if path.endswith("/"):
            if not (REPO / path).is_dir():
                out.append(f"{ref}: no such folder")
        elif not (REPO / path).is_file():
            out.append(f"{ref}: no such file")
        elif name and name not in defined_names(REPO / path):
            out.append(f"{ref}: {path} defines no {name}")
    return out


def test_every_test_the_readme_names_exists() -> None:
    refs = named_tests(README)
    assert len(refs) > 100  # the sections that name their tests were read
    assert missing(refs) == []


def test_a_reference_to_a_moved_or_renamed_test_is_caught() -> None:
    refs = named_tests(
        "(`tests/test_loop.py::test_green_passes`, `::test_no_such_test`, "
        "`tests/no_such_file.py`, `tests/chaos/`, `tests/no_such_dir/`)"
    )
    assert missing(refs) == [
        "tests/test_loop.py::test_no_such_test: tests/test_loop.py defines no test_no_such_test",
        "tests/no_such_file.py: no such file",
        "tests/no_such_dir/: no such folder",
    ]
    with pytest.raises(AssertionError):
        named_tests("`tests/test_loop.py:: test_green_passes`")


def redis_recipe() -> list[str]:
    """The README's commands for the Redis host (Scaling across servers)."""
    lines = README.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# on the Redis host"))
    return lines[start + 1 : start + 4]


@pytest.fixture
def recipe_redis(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The README's Redis recipe, run as shown, on a local port instead of 10.0.0.5."""
    recipe = redis_recipe()
    assert recipe[-1].startswith("redis-server redis-auth.conf ")
    assert "--bind 10.0.0.5" in recipe[-1]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    recipe[-1] = "exec " + recipe[-1].replace(
        "--bind 10.0.0.5", f"--bind 127.0.0.1 --port {port} --dir {tmp_path}"
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "redis-server").symlink_to(redis_executable())
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.Popen(["sh", "-c", "\n".join(recipe)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait_for_port(port, proc)
        yield port, proc
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_the_readme_redis_recipe_requires_its_password_and_keeps_it_off_the_command_line(
    recipe_redis: tuple[int, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    port, proc = recipe_redis
    password = (tmp_path / "redis.pass").read_text().strip()
    assert len(password) == 48
    assert stat.S_IMODE((tmp_path / "redis.pass").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "redis-auth.conf").stat().st_mode) == 0o600
    assert_password_required(port, password, proc.pid)
