"""A key indented deeper or shallower than the keys around it, found behind PyYAML's message
(the project spec and the stub script are written by hand).

PyYAML reports an over-indented key (`kind: be` then `      depends_on: [a]`) as "mapping
values are not allowed here", because it reads the key as more of the value above, and an
under-indented one as "expected <block end>". Neither says what to do. Here the key's line is
set at the indentation of each enclosing key in turn; the one that makes the spec parse is
the indentation it needs.
"""

from __future__ import annotations

import re
from collections.abc import Container
from dataclasses import dataclass

import yaml

# `key:` or `- key:` at the start of a line (a plain or quoted key, then `:` and a space).
_KEY = re.compile(
    r"^(?P<indent> *)(?P<dash>(?:- +)*)"
    r"(?P<key>\"[^\"]*\"|'[^']*'|[^\s#'\"\[\]{}&*!|>%@`:-][^#]*?|-[^\s#][^#]*?)"
    r" *:(?: |$)"
)


@dataclass(frozen=True)
class Misindent:
    """A key on `line` (1-based) at `found` spaces that belongs at `expected`, in line with
    `near` (a key on `near_line`)."""

    line: int
    key: str
    found: int
    expected: int
    near: str
    near_line: int
    fixed: str  # the text with the line re-indented


def _key_at(text: str) -> tuple[int, int, str] | None:
    """(column of the key, length of its `- ` prefix, key) of a line that opens with a key,
    or None."""
    match = _KEY.match(text)
    if match is None:
        return None
    dash = len(match["dash"])
    return len(match["indent"]) + dash, dash, match["key"].strip("\"'")


def _parses(text: str) -> tuple[bool, int]:
    """Whether text parses, and the 1-based line of its first error (0: none)."""
    try:
        yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        return False, mark.line + 1 if mark else 0
    except yaml.YAMLError:
        return False, 0
    return True, 0


def _enclosing(lines: list[str], index: int) -> list[tuple[int, str, int]]:
    """(column, key, line) of the keys above lines[index] that could be its siblings: the
    nearest key line, then each shallower one before it."""
    found: list[tuple[int, str, int]] = []
    bound = 1 << 30
    for i in range(index - 1, -1, -1):
        stripped = lines[i].strip()
        if not stripped or stripped.startswith("#"):
            continue
        key = _key_at(lines[i])
        if key is not None and key[0] < bound:
            found.append((key[0], key[2], i + 1))
            bound = key[0]
    return found


def misindented(text: str, line: int) -> Misindent | None:
    """The indentation fix for the key on `line` where PyYAML stopped, or None when that
    line holds no key or no other indentation makes the spec parse."""
    lines = text.split("\n")
    if not 0 < line <= len(lines):
        return None
    key = _key_at(lines[line - 1])
    if key is None:
        return None
    found, dash, name = key
    body = lines[line - 1].lstrip(" ")
    following = next((k[0] for k in map(_key_at, lines[line:]) if k is not None), None)
    tried: list[tuple[tuple[bool, int, bool, int], Misindent]] = []
    for column, near, near_line in _enclosing(lines, line - 1):
        if column == found or column < dash:
            continue
        fixed = "\n".join([*lines[: line - 1], " " * (column - dash) + body, *lines[line:]])
        ok, at = _parses(fixed)
        if not ok and (at == 0 or at <= line):
            continue  # this indentation does not get past the line either
        rank = (not ok, abs(column - found), column != following, -column)
        tried.append((rank, Misindent(line, name, found, column, near, near_line, fixed)))
    return min(tried, key=lambda pair: pair[0])[1] if tried else None


def described(found: Misindent, keys: Container[str]) -> tuple[str, str]:
    """(what is wrong, the fix) for a misindented key; keys are the file's known keys (another
    deeper line may be text of the value above that holds `: `)."""
    side = "deeper" if found.found > found.expected else "shallower"
    message = (f"indented {found.found} spaces, {side} than `{found.near}` on line "
               f"{found.near_line} ({found.expected} spaces)")
    fix = (f"indent `{found.key}` {found.expected} spaces" if found.expected
           else f"move `{found.key}` to the start of the line") + f", in line with `{found.near}`"
    if found.found > found.expected and found.key not in keys:
        fix += " (or, if that line belongs to the value above, quote the value)"
    return message, fix
