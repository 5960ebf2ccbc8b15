"""A unit holds source, not artifacts: the one rule for what may enter it, and how a
review shows what it holds. Pure.

By name, anywhere in a unit (paths relative to the unit dir):
- version-control metadata: a path with a part `.git`, `.hg`, `.svn` or `.bzr` (a file or a
  dir; a planted `.git/config` runs commands, `core.fsmonitor`, when git runs there);
- bytecode caches: a part `__pycache__` (python runs a cached `.pyc` instead of the `.py`
  beside it, and an unchecked-hash one is never compared with its source);
- compiled code: a name ending `.pyc`, `.pyo`, `.so` (or `.so.N`), `.pyd`, `.dylib`,
  `.dll`, `.node`, `.wasm`, `.o`, `.a`, `.class`, `.jar` or `.exe` (a `money.*.so` is
  imported before `money.py`).
Names are compared case-insensitively, trailing dots and spaces ignored (`.GIT` is `.git`
on the file systems a folder may be copied to). `.gitignore`, `.gitattributes` and
`.gitmodules` are text: a filter or driver they name runs only if a `.git/config` defines
it, and a unit never holds one.

By content, under `code/` and `tests/` (what is reviewed and what runs): UTF-8 text without
NUL bytes, and without the bidi controls that reorder how a line is shown (U+202A-U+202E,
U+2066-U+2069: Trojan Source, CVE-2021-42574). A string that needs one writes it as an
escape (`"\\u202e"` in python and JS), which every reader sees; rustc refuses them the same
way. The marks U+200E, U+200F and U+061C are legitimate in right-to-left text: allowed, and
marked in a review like the controls.
"""

from __future__ import annotations

import hashlib
import re

VCS_NAMES = (".git", ".hg", ".svn", ".bzr")
CACHE_NAMES = ("__pycache__",)
COMPILED_SUFFIXES = (".pyc", ".pyo", ".so", ".pyd", ".dylib", ".dll", ".node", ".wasm",
                     ".o", ".a", ".class", ".jar", ".exe")
_VERSIONED_SO = re.compile(r"\.so(\.\d+)+$")
TEXT_DIRS = ("code/", "tests/")
# Refused in code/ and tests/: they reorder what a reader sees.
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Marked wherever a review shows text: the controls, the marks, and other invisible controls.
_MARKED = re.compile("[\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _plain(name: str) -> str:
    return name.rstrip(". ").casefold()


def name_refusal(rel: str) -> str | None:
    """Why a unit-relative path can never be a unit's file, by its name alone, or None."""
    parts = [p for p in rel.split("/") if p]
    for part in parts:
        plain = _plain(part)
        if plain in VCS_NAMES:
            return f"version-control metadata ({plain}), not source"
        if plain in CACHE_NAMES:
            return f"a bytecode cache ({plain}), not source"
    last = _plain(parts[-1]) if parts else ""
    suffix = next((s for s in COMPILED_SUFFIXES if last.endswith(s) and last != s), None)
    if suffix is None and (versioned := _VERSIONED_SO.search(last)):
        suffix = versioned.group(0)
    if suffix is not None:
        return f"compiled code ({suffix}), not source"
    return None


def refused_dir(rel: str) -> bool:
    """Whether a directory's own name makes everything under it refused."""
    plain = _plain(rel.rsplit("/", 1)[-1])
    return plain in VCS_NAMES or plain in CACHE_NAMES


def content_fault(rel: str, data: bytes) -> tuple[str, str] | None:
    """(what is wrong, the fix) for a file under code/ or tests/ that is not source text,
    or None (other paths: None)."""
    if not rel.startswith(TEXT_DIRS):
        return None
    if b"\0" in data:
        return (f"a binary file ({len(data)} bytes, NUL bytes among them): code/ and tests/ "
                "hold source text only", "remove it")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return (f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}): code/ "
                "and tests/ hold UTF-8 source", "save it as UTF-8 or remove it")
    found = bidi_controls(text)
    if found:
        line, char = found[0]
        return (f"holds the bidi control {codepoint(char)} on line {line} (Trojan Source: it "
                "reorders what a reader sees)",
                f"write it as an escape (\\u{ord(char):04x}) or remove it")
    return None


def content_refusal(rel: str, data: bytes) -> str | None:
    """Why a file under code/ or tests/ is not source text, with the fix, or None."""
    fault = content_fault(rel, data)
    return None if fault is None else "; ".join(fault)


def refusal(rel: str, data: bytes) -> str | None:
    """Why a file may not enter a unit (its name, then its content), or None."""
    return name_refusal(rel) or content_refusal(rel, data)


def bidi_controls(text: str) -> list[tuple[int, str]]:
    """(line number, character) of every bidi control in text."""
    return [(n, c) for n, line in enumerate(text.split("\n"), start=1)
            for c in line if c in BIDI_CONTROLS]


def codepoint(char: str) -> str:
    """`U+202E`."""
    return f"U+{ord(char):04X}"


def is_text(data: bytes) -> bool:
    """UTF-8 without NUL bytes: what a review shows as lines."""
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def binary_summary(data: bytes) -> str:
    """How a review shows a file that is not text: its size and digest, never its bytes."""
    return f"binary file, {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}"


def marked(text: str) -> str:
    """text with every bidi control or mark and every invisible control but tab shown as
    `<U+202E>`, so a review shows the characters a reader would not see."""
    return _MARKED.sub(lambda m: f"<{codepoint(m.group(0))}>", text)


# A mark `marked` made, as it reads in its output (the console highlights these).
MARK = re.compile(r"(<U\+(?:202[A-E]|206[6-9]|200[EF]|061C|00[0-9A-F]{2})>)")


def pieces(line: str) -> list[tuple[str, bool]]:
    """A marked line as (text, is a mark) pieces, for a page to highlight the marks."""
    return [(part, i % 2 == 1) for i, part in enumerate(MARK.split(line)) if part]


def not_imported(entry: str) -> str:
    """The line an import prints for an artifact it left out (`units/u/code/.git/: why`)."""
    line = f"not imported: {entry} (DevLoop never runs it or writes it back)"
    if any(f"({name})" in entry for name in VCS_NAMES):
        line += ("; metadata someone else put there can run commands when its tool (git) "
                 "runs in that folder")
    return line
