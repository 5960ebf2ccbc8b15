"""The rule for what a unit may hold: source, not artifacts (devloop/core/artifacts.py)."""

from __future__ import annotations

import pytest

from devloop.core.artifacts import (
    binary_summary,
    content_refusal,
    marked,
    name_refusal,
    pieces,
    refusal,
    refused_dir,
)


@pytest.mark.parametrize(("rel", "what"), [
    ("code/.git/config", "version-control metadata (.git)"),
    ("code/.git", "version-control metadata (.git)"),  # a file `gitdir: ...` too
    ("code/sub/.hg/hgrc", "version-control metadata (.hg)"),
    ("tests/.svn/entries", "version-control metadata (.svn)"),
    ("runs/r1/.bzr/x", "version-control metadata (.bzr)"),
    ("code/.GIT/config", "version-control metadata (.git)"),  # a case-insensitive disk
    ("code/.git./config", "version-control metadata (.git)"),
    ("code/__pycache__/money.cpython-311.pyc", "a bytecode cache (__pycache__)"),
    ("code/money.pyc", "compiled code (.pyc)"),
    ("code/money.cpython-311-x86_64-linux-gnu.so", "compiled code (.so)"),
    ("code/libm.so.6", "compiled code (.so.6)"),
    ("code/addon.node", "compiled code (.node)"),
    ("code/m.PYD", "compiled code (.pyd)"),
])
def test_artifacts_are_refused_by_name_anywhere_in_a_unit(rel: str, what: str) -> None:
    assert name_refusal(rel) == f"{what}, not source"
    assert refusal(rel, b"text") == f"{what}, not source"


@pytest.mark.parametrize("rel", [
    "code/.gitignore", "code/.gitattributes", "code/git.py", "code/so.py", "code/pyc.js",
    "code/pkg/__init__.py", "tests/test_x.py", "code/.github/notes.md", "contract.json",
])
def test_source_names_are_accepted(rel: str) -> None:
    assert name_refusal(rel) is None


def test_only_vcs_and_cache_dirs_refuse_everything_under_them() -> None:
    assert refused_dir("code/.git") and refused_dir("code/a/__pycache__")
    assert not refused_dir("code/lib.so")  # a dir named like a file: its files are judged


def test_code_and_tests_hold_utf8_text_without_nul_or_bidi_controls() -> None:
    assert "a binary file (3 bytes, NUL bytes among them)" in str(
        content_refusal("code/a.py", b"a\0b"))
    assert "not UTF-8 text (byte 0xa7 at offset 0)" in str(
        content_refusal("tests/t.py", b"\xa7\r\r\n"))
    trojan = 'ok = "user"\nif role != "admin\u202e \u2066// comment\u2069 \u2066":\n'.encode()
    why = content_refusal("code/auth.py", trojan)
    assert why is not None and "bidi control U+202E on line 2" in why and "\\u202e" in why
    # right-to-left marks are text (Hebrew, Arabic): allowed; escapes are allowed
    hebrew = 'he = "\u05e9\u05dc\u05d5\u05dd\u200f"\n'
    assert content_refusal("code/i18n.py", hebrew.encode()) is None
    assert content_refusal("code/x.py", b'x = "\\u202e"\n') is None
    # the content rule is for what is reviewed and run; runs/ holds the runner's output
    assert content_refusal("runs/r1/stdout.txt", b"\0\xff") is None


def test_a_review_marks_what_a_reader_would_not_see() -> None:
    line = marked("if x\u202e and \x1b[31m\tgo")
    assert line == "if x<U+202E> and <U+001B>[31m\tgo"
    assert pieces(line) == [("if x", False), ("<U+202E>", True), (" and ", False),
                            ("<U+001B>", True), ("[31m\tgo", False)]
    assert binary_summary(b"\0\1") == (
        "binary file, 2 bytes, sha256 "
        "b413f47d13ee2fe6c845b2ee141af81de858df4ec549a58b7970bb96645bc8d2")
