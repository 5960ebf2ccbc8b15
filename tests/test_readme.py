"""The README and the pages of docs/: the generated tables match the code they describe,
every test they name exists, every link and anchor between them resolves, the README stays a
short front door that links every page, and the Redis recipe they show requires its password."""

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

from devloop.core.config import settings_table
from devloop.roles.tooltable import tool_table
from devloop.server.redis_server import redis_executable
from tests.proctree import wait_for_port
from tests.redis_fixture import assert_password_required

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()
# The README and every page of docs/, by path from the repository's root.
PAGES = {path.relative_to(REPO).as_posix(): path.read_text()
         for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]}
README_MAX_BYTES = 25_600
# `tests/x/test_y.py`, `tests/x/test_y.py::name`, `::name` (of the last file named), `tests/x/`
FILE_REF = re.compile(r"tests/[\w/.-]+\.py(?:::\w+)?")
NAME_REF = re.compile(r"::\w+")
DIR_REF = re.compile(r"tests/[\w/-]+/")


def test_the_docs_list_every_tool_per_role_as_the_registry_does() -> None:
    assert tool_table() in PAGES["docs/architecture.md"]


def test_the_docs_list_every_setting_with_its_default() -> None:
    assert settings_table() in PAGES["docs/configuration.md"]


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


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_test_a_page_names_exists(page: str) -> None:
    assert missing(named_tests(PAGES[page])) == []


def test_the_claims_moved_into_docs_keep_their_tests() -> None:
    refs = [ref for text in PAGES.values() for ref in named_tests(text)]
    assert len(refs) > 350  # the pages that name their tests were read
    least = {"docs/architecture.md": 100, "docs/security.md": 150, "docs/running.md": 20,
             "docs/operations.md": 20}
    assert {page: n for page, n in least.items() if len(named_tests(PAGES[page])) < n} == {}


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


def test_the_readme_is_a_short_front_door_that_links_every_page_of_docs() -> None:
    size = len(README.encode())
    assert size <= README_MAX_BYTES, f"README.md is {size:,} bytes; move detail into docs/"
    linked = {target.partition("#")[0] for target in links(README)}
    pages = [page for page in PAGES if page.startswith("docs/")]
    assert len(pages) >= 10
    assert [page for page in pages if page not in linked] == []


def slugs(text: str) -> set[str]:
    """The anchors GitHub makes of a page's headings: lowercased, punctuation but `-` and `_`
    dropped, spaces to `-`, a repeated one numbered (`-1`, `-2`)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def links(text: str) -> list[str]:
    """Every link and image target of a page outside code, web addresses left out."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    prose = re.sub(r"`[^`\n]*`", "", prose)
    return [target for target in re.findall(r"\]\(([^)\s]+)\)", prose)
            if not re.match(r"[a-z]+:", target)]


def broken(page: str, text: str) -> list[str]:
    """The links of a page whose file, or whose heading in that file, does not exist."""
    out = []
    for target in links(text):
        path, _, anchor = target.partition("#")
        file = (REPO / page).parent / path if path else REPO / page
        if not file.exists():
            out.append(f"{page}: {target}: no such file")
        elif anchor and anchor not in slugs(file.read_text()):
            out.append(f"{page}: {target}: {file.relative_to(REPO)} has no heading #{anchor}")
    return out


@pytest.mark.parametrize("page", sorted(PAGES))
def test_every_link_and_anchor_of_a_page_resolves(page: str) -> None:
    assert broken(page, PAGES[page]) == []


def test_a_link_to_a_moved_section_or_a_missing_page_is_caught() -> None:
    assert slugs("# Quick start: from a spec.yaml to a report\n## `devloop run` at scale\n"
                 "## Faults\n## Faults\n```\n# not a heading\n```\n") == {
        "quick-start-from-a-specyaml-to-a-report", "devloop-run-at-scale", "faults",
        "faults-1"}
    text = ("[a](docs/cli.md) [b](#the-live-console) [c](docs/operations.md#the-live-console) "
            "[d](docs/no-such-page.md) `[e](#in-code)` [f](https://example.com/#x)")
    assert broken("README.md", text) == [
        "README.md: #the-live-console: README.md has no heading #the-live-console",
        "README.md: docs/no-such-page.md: no such file",
    ]


def redis_recipe() -> list[str]:
    """The commands for the Redis host (docs/operations.md, Scaling across servers)."""
    lines = PAGES["docs/operations.md"].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# on the Redis host"))
    return lines[start + 1 : start + 4]


@pytest.fixture
def recipe_redis(tmp_path: Path) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """The Redis recipe of the docs, run as shown, on a local port instead of 10.0.0.5."""
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
