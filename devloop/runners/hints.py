"""Turn one failed test into a hint a coder can act on: what went wrong and where.

`build_hint` reads the failure's stack (error lines, the frame inside `code/`, the
source line a runner appended with `base.with_source`) and the expected/got pair,
and says in one or two sentences what the code did, where, and what to do instead.
It never says "fix the bug" and never stops at a bare "expected X got Y".
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from devloop.core.vagueness import is_specific
from devloop.runners.base import PY_FRAME, Frame, code_frame, frame_in_tests

# An exception class, known by its last dotted name (pytest prints `edge.EdgeError`,
# `boltons.urlutils.URLParseError` for classes outside builtins): `…Error`, `…Exception`,
# `…Warning`, the builtins named otherwise, or any CapWords class with a module prefix.
_EXC_CLASS = (
    r"(?:[A-Za-z_]\w*\.)*(?:(?:[A-Z]\w*)?(?:Error|Exception|Warning)|StopIteration"
    r"|StopAsyncIteration|KeyboardInterrupt|SystemExit|GeneratorExit)"
    r"|(?:[A-Za-z_]\w*\.)+[A-Z]\w*(?=:)"
)
_ERROR = re.compile(rf"^\s*(?:E\s+)?((?:{_EXC_CLASS})\b:?.*)$", re.M)
_UNDEF_JS = re.compile(
    r"Cannot (?:read|set) propert(?:y|ies) of (undefined|null) \((?:reading|setting) '([^']*)'\)"
    r"|Cannot read property '([^']*)' of (undefined|null)"
)
_NONE_ATTR = re.compile(r"'NoneType' object has no attribute '(\w+)'")
_KEY_ERROR = re.compile(r"^\s*(?:E\s+)?KeyError: (['\"]?)(.+?)\1\s*$", re.M)
_SQLITE = re.compile(
    r"SQLITE_CONSTRAINT_(UNIQUE|NOTNULL|FOREIGNKEY|PRIMARYKEY|CHECK)"
    r"|(UNIQUE|NOT NULL|FOREIGN KEY|CHECK|PRIMARY KEY) constraint failed"
)
_CONSTRAINTS = {"NOTNULL": "NOT NULL", "FOREIGNKEY": "FOREIGN KEY", "PRIMARYKEY": "PRIMARY KEY"}
_COLUMN = re.compile(r"constraint failed: ([\w.]+)")
_TIMEOUT = re.compile(r"(?:Test|Hook) timed out in \d+ ?ms|\btimed out\b|TimeoutError", re.I)
_NO_MODULE = re.compile(r"No module named '([\w.]+)'|Cannot find (?:module|package) '([^']+)'")
_NOT_FUNCTION = re.compile(r"TypeError: ([\w$.]+(?:\(\.\.\.\))?) is not a function")
_NO_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
_HTTP = {200, 201, 202, 204, 301, 302, 304, 400, 401, 403, 404, 405, 409, 410, 413, 415, 422,
         429, 500, 501, 502, 503}  # fmt: skip
_AUTH = (
    "check that the user/token exists before comparing (e.g. bcrypt.compare with a missing "
    "hash) and answer 401"
)
# What the pytest runner appends (devloop/runners/pyassert.py) and pytest prints.
_CALLS = re.compile(r"^calls: (code/\S+?):(\d+): (.*)$\n?", re.M)
_PY_ASSERT = re.compile(r"^>\s+(assert\b.*?)\s*$", re.M)
_EVALUATED = re.compile(r"^E\s+(?:AssertionError: )?(assert .*?)\s*$", re.M)
_DEFINED = re.compile(r"\b(?:def|class)\s+(\w+)")
_DEF_LINE = re.compile(r"^(?:async\s+)?def \w+\(")
_DOTTED = re.compile(r"[a-z_]\w*\.[A-Za-z_]")
_PHRASES = (("not in ", "a value not in "), ("in ", "one of "), ("!= ", "anything but "),
            ("not None", "a value, not None"))


def exception_name(line: str) -> str:
    """The class an error line names, by its last dotted name (`edge.EdgeError: x` ->
    `EdgeError`)."""
    return line.split(":", 1)[0].strip().rsplit(".", 1)[-1]


def _error_near(stack: str, frame: Frame | None) -> str | None:
    """The error line that goes with the code frame (a stack may hold several errors)."""
    found = [(m.start(), m.group(1).strip()[:200]) for m in _ERROR.finditer(stack)]
    found = [(pos, text) for pos, text in found if exception_name(text) != "AssertionError"]
    if PY_FRAME.search(stack):  # pytest prints the error below the frames
        return found[-1][1] if found else None
    at = stack.find(f"{frame.path}:{frame.line}") if frame else len(stack)
    before = [text for pos, text in found if pos < at] or [text for _, text in found]
    return before[-1] if before else None


def _expression(source: str | None, member: str) -> str | None:
    """The expression whose `.member` (or `[member]`) the source line reads (not assigns)."""
    esc = re.escape(member)
    pattern = (
        rf"([A-Za-z_$][\w$]*(?:\??\.[A-Za-z_$][\w$]*|\[[^\]]+\]|\(\))*?)\s*"
        rf"(?:\??\.{esc}\b|\[['\"]?{esc}['\"]?\])(?!\s*=[^=])"
    )
    found = re.search(pattern, source or "")
    return found.group(1) if found else None


@dataclass(frozen=True)
class Ctx:
    """Everything the rules look at, computed once."""

    test: str
    expected: Any
    got: Any
    stack: str
    frame: Frame | None
    caller: Frame | None  # where the test called into the code
    error: str | None  # the error line that goes with `frame`
    assertion: str | None = None  # python: the `assert` statement that failed
    calls: tuple[tuple[str, str, str], ...] = ()  # python: (name, code/x.py:N, source) called

    @property
    def where(self) -> str:
        """Where to look: the code frame, else the test's call into the code."""
        if self.frame is not None:
            return str(self.frame)
        if self.caller is not None:
            return f"the code/ behind the test's call at {self.caller}"
        return f"the code/ functions that `{self.test}` calls"

    @property
    def status(self) -> tuple[int, int] | None:
        """(expected, got) when both look like HTTP status codes."""
        exp, got = _as_int(self.expected), _as_int(self.got)
        if exp is None or got is None or exp == got or not {exp, got} <= _HTTP:
            return None
        return exp, got


def _as_int(value: Any) -> int | None:
    """An int from an int or a numeric string (pytest/vitest give either)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _cause(c: Ctx) -> tuple[str, str] | None:
    """(what the code did, what to do about it) from the stack's error, if recognised."""
    s = c.stack
    if m := _UNDEF_JS.search(s):
        value, prop = m.group(1) or m.group(4), m.group(2) or m.group(3)
        expr = _expression(c.frame.source if c.frame else None, prop)
        subject = f"`{expr}`" if expr else "a value"
        return (
            f"{subject} is {value} when its `.{prop}` is read at {c.where}",
            f"check that {subject} is present (this test's input leaves it out) "
            f"before reading `.{prop}`",
        )
    if m := _NONE_ATTR.search(s):
        attr = m.group(1)
        expr = _expression(c.frame.source if c.frame else None, attr)
        subject = f"`{expr}`" if expr else "a value"
        return (
            f"{subject} is None when `.{attr}` is used at {c.where}",
            f"handle the None case (missing input or lookup result) before using `.{attr}`",
        )
    if m := _KEY_ERROR.search(s):
        key = m.group(2)
        expr = _expression(c.frame.source if c.frame else None, key)
        lookup = f"`{expr}[{key!r}]`" if expr else f"the lookup of key {key!r}"
        return (
            f"{lookup} raised KeyError at {c.where} because the input has no {key!r}",
            f"read it with `.get({key!r})` or validate that {key!r} is present and reject "
            "the input (400 / ValueError) instead of indexing",
        )
    if m := _SQLITE.search(s):
        kind = (m.group(1) or m.group(2)).replace(" ", "")
        column = f" on {col.group(1)}" if (col := _COLUMN.search(s)) else ""
        advice = {
            "UNIQUE": "look for an existing row first (or catch the constraint error) and "
            "answer 409 Conflict",
            "PRIMARYKEY": "look for an existing row first and answer 409 Conflict",
            "NOTNULL": "validate that the field is present and answer 400 before inserting",
            "FOREIGNKEY": "check that the referenced row exists and answer 404/400 before writing",
        }.get(kind, "validate the input against the constraint and answer 400 before writing")
        what = f"a {_CONSTRAINTS.get(kind, kind)} constraint{column}"
        return f"the SQLite write hit {what} at {c.where}", advice
    if m := _NO_NAME.search(s):
        return (
            f"the import of `{m.group(1)}` from `{m.group(2)}` failed at {c.frame or c.caller}",
            f"define `{m.group(1)}` in `{m.group(2)}` or import the name it really has",
        )
    if m := _NO_MODULE.search(s):
        name = m.group(1) or m.group(2)
        return (
            f"module `{name}` cannot be found (imported at {c.frame or c.caller})",
            "import only modules that exist under code/ (with the right relative path) or in "
            "the test toolchain; nothing else is installed",
        )
    if m := _NOT_FUNCTION.search(s):
        return (
            f"`{m.group(1)}` is not a function at {c.where}",
            "check the import matches the export (module.exports vs export default, named vs "
            "default) and the method name",
        )
    if c.error:
        return f"{c.error} was raised at {c.where}", "make the code handle this test's input"
    return None


def _status_hint(c: Ctx, exp: int, got: int) -> str:
    """Hints for an HTTP status mismatch, with the cause from the stack when there is one."""
    cause = _cause(c)
    because = (
        f" because {cause[0]}"
        if cause
        else f" (an exception escaped the route, or the code chose 500 itself; see {c.where})"
    )
    then = f"{cause[1]}, then " if cause else ""
    if got == 500 and cause and "SQLite" in cause[0]:
        return (
            f"The route crashed with 500 because {cause[0]}; {cause[1]} (the test expects {exp})."
        )
    if got == 500 and exp == 400:
        return (
            f"Invalid input should be rejected with 400 before the service runs, but the route "
            f"crashed with 500{because}. {_cap(then) or 'Validate the input in the route and '}"
            "answer 400 from the route."
        )
    if got == 500 and exp == 401:
        fix = f"{cause[1]} and answer 401 when it is missing" if cause else _AUTH
        return (
            f"Bad credentials should get 401, but the route crashed with 500{because}. {_cap(fix)}."
        )
    if exp == 404 and got == 200:
        return (
            f"A request for a resource that does not exist should get 404, but the route answered "
            f"200 ({c.where}): check the lookup result (undefined/None row) and answer 404 when "
            "nothing was found."
        )
    if exp == 404 and got == 500:
        return (
            f"A missing resource should get 404, but the route crashed with 500{because}. "
            f"{_cap(then)}answer 404 when the lookup finds nothing."
        )
    if got == 500:
        return (
            f"This request should get {exp}, but an exception escaped the route and became a "
            f"500{because}. {_cap(then)}answer {exp} for this case."
        )
    if exp in (400, 422) and got < 300:
        return (
            f"Invalid input was accepted with {got} instead of being rejected with {exp}: add "
            f"the missing validation for the input `{c.test}` sends ({c.where})."
        )
    if exp == 401 and got < 300:
        return (
            f"The route answered {got} without valid credentials: check authentication before "
            f"doing the work and answer 401 ({c.where})."
        )
    if exp < 300 and 400 <= got < 500:
        return (
            f"A valid request was rejected with {got} where {exp} was expected: the check that "
            f"answers {got} is too strict or reads the wrong field ({c.where})."
        )
    return (
        f"The route answered {got} where {exp} was expected for the request in `{c.test}`: "
        f"look at the branch that sets the status ({c.where})."
    )


def _timeout_hint(c: Ctx) -> str | None:
    """A test that never finished (unless a status pair says more)."""
    m = _TIMEOUT.search(c.stack)
    if m is None or c.status is not None:
        return None
    # vitest: "Test timed out in 200ms." (a hook's: "Hook timed out in ...").
    limit = re.match(r"(Test|Hook) timed out in (\d+) ?ms", m.group(0), re.I)
    what = f"did not finish ({m.group(0)})"
    if limit:
        whose = "a hook's" if limit.group(1).lower() == "hook" else "its own"
        what = f"timed out after {limit.group(2)} ms ({whose} time limit)"
    return (
        f"`{c.test}` {what}: look for a missing `await`, a promise or "
        "callback that never resolves (a route that never sends a response), or an external "
        "call that has to be mocked."
    )


def _error_hint(c: Ctx) -> str | None:
    """A recognised exception in the code, with no status pair."""
    cause = _cause(c)
    if cause is None:
        return None
    return f"{_cap(cause[0])}: {cause[1]}."


def _assertion_hint(c: Ctx) -> str | None:
    """A failed python `assert`: the assertion, its values, where it is, the code it calls."""
    if c.assertion is None or c.error is not None:
        return None
    where = f" at {c.caller.path}:{c.caller.line}" if c.caller else ""
    subject = _asserted(c.assertion)
    if c.expected is not None or c.got is not None:
        got = c.got if isinstance(c.got, str) and c.got.startswith("<") else _show(c.got)
        values = f"got {got} where {_wanted(c.expected)} was expected (from `{subject}`)"
    else:
        evaluated = _EVALUATED.search(c.stack)
        values = f"pytest evaluated it as `{evaluated.group(1)[:200]}`" if evaluated else \
            "it was false"
    if c.calls:
        called = " and ".join(f"`{name}` at {place} (`{source}`)"
                              for name, place, source in c.calls[:2])
        then = f"The test calls {called}: trace the value from there"
    else:
        then = f"Start at {c.where}"
    return f"`{c.assertion[:200]}` failed{where}: {values}. {then}."


def _asserted(assertion: str) -> str:
    """The expression an assert statement checks the value of (`money.Money(None, None)`)."""
    try:
        node = ast.parse(assertion).body[0]
    except (SyntaxError, IndexError):
        return assertion.removeprefix("assert ")
    test = node.test if isinstance(node, ast.Assert) else None
    if isinstance(test, ast.Compare):
        test = test.left
    elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if test is None:
        return assertion.removeprefix("assert ")
    return ast.get_source_segment(assertion, test) or ast.unparse(test)


def _wanted(expected: Any) -> str:
    """How an expected value or phrase (`None`, `in [...]`, `< 3`) reads in a sentence."""
    if not isinstance(expected, str):
        return _show(expected)
    for prefix, words in _PHRASES:
        if expected.startswith(prefix):
            return words + expected[len(prefix):]
    return expected if expected in ("None", "a true value", "a false value") else _show(expected)


def _fallback(c: Ctx) -> str:
    """Still says what differed and where to look."""
    if c.expected is not None or c.got is not None:
        return (
            f"`{c.test}` got {_show(c.got)} where {_show(c.expected)} was expected: trace "
            f"that value back from {c.where}."
        )
    lines = [ln.strip() for ln in c.stack.splitlines() if ln.strip()]
    # The error line, else the failing source line; never the test's own `def` line.
    first = next((ln for ln in lines if ln.startswith("E ")), None) or next(
        (ln for ln in lines if not _DEF_LINE.match(ln)), "no message")
    return f'`{c.test}` failed with "{first.removeprefix("E").strip()[:200]}": start at {c.where}.'


def _cap(text: str) -> str:
    """Upper-case the first letter only (str.capitalize lowercases the rest); a dotted
    name (`edge.EdgeError`) is left as it is spelled."""
    if _DOTTED.match(text):
        return text
    return text[:1].upper() + text[1:]


def _show(value: Any) -> str:
    """A value as the coder should read it in a sentence."""
    return "nothing" if value is None else repr(value) if isinstance(value, str) else str(value)


# Tried in order; the first hint wins, `_fallback` when none applies.
RULES: list[Callable[[Ctx], str | None]] = [
    _timeout_hint,
    lambda c: _status_hint(c, *c.status) if c.status else None,
    _error_hint,
    _assertion_hint,
]


def build_hint(test: str, expected: Any, got: Any, stack: str) -> str:
    """One or two English sentences telling the coder what went wrong and where."""
    stack = stack or ""
    # The runner's `calls:` lines name definitions, not frames: keep them out of the search.
    calls = tuple((name.group(1), f"{m.group(1)}:{m.group(2)}", m.group(3))
                  for m in _CALLS.finditer(stack) if (name := _DEFINED.search(m.group(3))))
    frames = _CALLS.sub("", stack)
    frame = code_frame(frames)
    assertion = _PY_ASSERT.search(frames)
    ctx = Ctx(test, expected, got, frames, frame, frame_in_tests(frames),
              _error_near(frames, frame), assertion.group(1) if assertion else None, calls)
    for rule in RULES:
        if text := rule(ctx):
            return text
    return _fallback(ctx)


# What `_fallback` writes when no rule knew the failure: a draft the tester must improve.
FALLBACK = re.compile(
    r"where .{0,300}? was expected: trace that value back from |failed with \".*?\": start at ",
    re.S,
)
_ROUTE = re.compile(r"\b(?:GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS)\s+/|(?<![\w.])/[A-Za-z_:{]")
_NAMED = re.compile(
    r"`[^`\s][^`]*`|\b[\w$]+(?:\.[\w$]+)+\b|\b\w+/[\w./-]+|\b[A-Za-z_$][\w$]*\("
    r"|\b[a-z][a-z0-9]*_[a-z0-9_]+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z]+(?:[A-Z][a-z]+)+\b"
    r"|\d|['\"]\w"
)
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")


def names_the_code(hint: str, names: Iterable[str] = ()) -> bool:
    """Whether a hint names something in the code or a value: a file, a call, a route, an
    identifier (one of `names`, the code's own), a number or a quoted value."""
    if _NAMED.search(hint) or _ROUTE.search(hint):
        return True
    said = set(_IDENT.findall(hint))
    return any(name in said for name in names)


def is_useful_hint(
    hint: str | None,
    test: str | None = None,
    expected: Any = None,
    got: Any = None,
    names: Iterable[str] = (),
) -> bool:
    """The tester self-check, in any language: a hint that is empty once the test's name
    is taken out, generic ("please fix", "修复 bug", "check the logic more carefully"),
    only "expected X got Y", or the hint builder's own fallback draft fails; one that
    names the code (a file, a function, a route, `names`) or the value to change and
    says what to do passes."""
    if not hint or FALLBACK.search(hint):
        return False
    values = [str(v) for v in (expected, got) if v is not None]
    return is_specific(hint, names=[test] if test else [], values=values) and names_the_code(
        hint, names
    )
