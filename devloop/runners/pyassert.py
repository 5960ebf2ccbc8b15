"""What a failed pytest assertion says: its values (expected and got), and the code the
failing test line calls, found in the unit's code/ so the hint can point at it.

    assert <money.Money object at 0x7f..> is None   ->  expected "None", got "<money.Money ...>"
    > assert money.Money(None, None) is None        ->  calls: code/money.py:4: class Money:
"""

from __future__ import annotations

import ast
import builtins
import json
import re
from pathlib import Path
from typing import Any

from devloop.safe.safedir import Dir
from devloop.safe.safetree import Limits, TooMany, walk

# An assertion line of pytest's message, after any message of the test's own.
_ASSERT_LINE = re.compile(r"^(?:AssertionError: )?assert (.+)$", re.M)
_EQ = re.compile(r"^(.+?) == (.+)$")
_UNITTEST = re.compile(r"^AssertionError: (.+?) != (.+)$", re.M)
# `A op B`, the first operator that splits it (reprs may hold more: the first one wins).
_OPS = [
    (re.compile(r"^(.+) is not None$"), lambda a, b: ("not None", "None")),
    (re.compile(r"^(.+) is None$"), lambda a, b: ("None", py_literal(a))),
    (re.compile(r"^(.+?) not in (.+)$"), lambda a, b: (f"not in {b}", py_literal(a))),
    (re.compile(r"^(.+?) in (.+)$"), lambda a, b: (f"in {b}", py_literal(a))),
    (re.compile(r"^(.+?) (!=|<=|>=|<|>) (.+)$"), None),
]
_FAILED = re.compile(r"^>\s+(\S.*?)\s*$", re.M)  # pytest marks the failing source line
_TEST_DEF = re.compile(r"^\s*(?:async\s+)?def test\w*\(", re.M)
CALLS_SHOWN = 3
# The longest expected or got value kept whole; a longer one is cut there, saying so.
VALUE_CAP = 4000
CUT_NOTE = " [... cut at {cap} of {n} characters]"
CODE_LIMITS = Limits(entries=2000, depth=16, path_bytes=1024)
SOURCE_CAP = 1_000_000  # bytes read of one code file


def py_literal(text: str) -> Any:
    """A Python literal as a value when JSON keeps it as it is; anything else (a repr, a
    tuple, `{False: 2}`, whose key JSON would make "false") as pytest printed it, capped
    at VALUE_CAP characters (saying so)."""
    text = text.strip()
    if len(text) > VALUE_CAP:
        return f"{text[:VALUE_CAP]}{CUT_NOTE.format(cap=VALUE_CAP, n=len(text))}"
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return text
    return value if _json_keeps(value) else text


def _json_keeps(value: Any) -> bool:
    """Whether a value comes back from JSON the same, types included (True is not 1)."""
    try:
        back = json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return False
    return _same(value, back)


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON types all the way down."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def expected_got(message: str) -> tuple[Any, Any]:
    """(expected, got) from pytest's assertion message: `assert 500 == 400` (got on the
    left), unittest's `!=`, and `is None`, `in`, `<`, a bare value as phrases."""
    line = _ASSERT_LINE.search(message)
    if line is None:
        m = _UNITTEST.search(message)
        return (py_literal(m.group(2)), py_literal(m.group(1))) if m else (None, None)
    body = line.group(1).strip()
    if m := _EQ.match(body):
        return py_literal(m.group(2)), py_literal(m.group(1))
    if body.startswith("("):
        return None, None  # `assert (a and b)`: no single value to show
    for pattern, shape in _OPS:
        if m := pattern.match(body):
            if shape is None:
                return f"{m.group(2)} {m.group(3)}", py_literal(m.group(1))
            return shape(m.group(1), m.group(2) if m.lastindex and m.lastindex > 1 else "")
    if body.startswith("not "):
        return "a false value", py_literal(body[4:])
    return "a true value", py_literal(body)


def failed_line(stack: str) -> str | None:
    """The test's source line pytest marked with `>` (the assertion that failed)."""
    found = _FAILED.search(stack)
    return found.group(1) if found else None


def called_names(stack: str) -> list[str]:
    """Names the failing test line calls (then the lines of the test above it), in order."""
    marked = failed_line(stack)
    body = _test_body(stack)
    names: list[str] = []
    for line in ([marked] if marked else []) + body[::-1]:
        for name in _calls(line):
            if name not in names:
                names.append(name)
    return names


def _test_body(stack: str) -> list[str]:
    """The source lines of the test function pytest printed above its `>` line."""
    start = _TEST_DEF.search(stack)
    end = _FAILED.search(stack)
    if start is None or end is None or end.start() < start.start():
        return []
    return [ln.strip() for ln in stack[start.end() : end.start()].splitlines()[1:] if ln.strip()]


def _calls(line: str) -> list[str]:
    """The function or class names a line of Python calls (`money.Money(...)` -> Money)."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if isinstance(name, str) and name not in out:
                out.append(name)
    return out


def with_definitions(stack: str, unit_dir: Path) -> str:
    """Append `calls: code/x.py:N: <line>` for each code/ definition the failing test line
    calls (hints point at it); names defined nowhere in code/ (builtins) are skipped."""
    names = [n for n in called_names(stack) if not hasattr(builtins, n)][:8]
    if not names or "\ncalls: " in stack:
        return stack
    found = _definitions(unit_dir, names)
    extra = [f"calls: {found[n]}" for n in names if n in found][:CALLS_SHOWN]
    return "\n".join([stack, *extra]) if extra else stack


def _definitions(unit_dir: Path, names: list[str]) -> dict[str, str]:
    """name -> `code/x.py:N: def name(...):` for the first definition of each in code/."""
    wanted = re.compile(
        r"^[ \t]*(?:async[ \t]+def|def|class)[ \t]+(" + "|".join(map(re.escape, names)) + r")\b",
        re.M,
    )
    found: dict[str, str] = {}
    try:
        with Dir.open(unit_dir) as unit:
            if not unit.is_dir("code"):
                return found
            files = sorted(e.rel for e in walk(unit, "code", CODE_LIMITS)
                           if e.kind == "file" and e.problem is None and e.rel.endswith(".py"))
            for rel in files:
                try:
                    text = unit.read_text(f"code/{rel}", cap=SOURCE_CAP)
                except (OSError, UnicodeDecodeError):
                    continue
                for m in wanted.finditer(text):
                    line = text.count("\n", 0, m.start()) + 1
                    source = text[m.start() :].split("\n", 1)[0].strip()[:160]
                    found.setdefault(m.group(1), f"code/{rel}:{line}: {source}")
    except (OSError, TooMany):
        return found
    return found
