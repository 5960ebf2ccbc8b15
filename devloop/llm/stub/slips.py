"""The imperfect model's slips as edits of a scripted call: a wrong first fix, a weak test,
a malformed input. Pure functions over a call's input; None when a slip does not apply."""

from __future__ import annotations

import re
from typing import Any

# Rules for a wrong first fix, tried in order: the first that changes a code/ file wins.
# Each keeps the file valid (the syntax check passes) and makes a test of it fail.
_EXPRESS_STATUS = (re.compile(r"res\.status\(status\)"), "res.status(418)")
_VUE_TEXT = (re.compile(r"\{\{ unit \}\}"), "{{ unit }}?")
# `return X` of a value (not a status helper, not a closure); its value is replaced below.
_RETURN = re.compile(r"^(?P<pad>[ \t]*)return (?P<value>(?!\(req)(?!.*status).+?)(?P<end>;?)$",
                     re.M)


def _wrong_return(text: str, python: bool) -> str | None:
    match = _RETURN.search(text)
    if match is None:
        return None
    value = match["value"].strip()
    none = "None" if python else "null"
    wrong = "0" if value == none else none
    return text[: match.start("value")] + wrong + text[match.end("value"):]


def wrong_fix(path: str, content: str) -> str | None:
    """The file with one behaviour broken (a mutated return, status or text), or None."""
    if not path.startswith("code/"):
        return None
    for pattern, replacement in (_EXPRESS_STATUS, _VUE_TEXT):
        if path.endswith((".js", ".vue")) and pattern.search(content):
            return pattern.sub(replacement, content, count=1)
    if path.endswith((".py", ".js", ".mjs", ".cjs", ".ts")):
        return _wrong_return(content, python=path.endswith(".py"))
    return None


_PY_ASSERT = re.compile(r"^(?P<pad>[ \t]*)assert (?P<expr>.+)$", re.M)
_JS_EXPECT = re.compile(r"expect\((?P<expr>.+?)\)\.(?:toBe|toEqual|toStrictEqual)\(.+?\);?$",
                        re.M)


def weak_test(path: str, content: str) -> str | None:
    """The test file with its first assertion made one that passes whatever the code does."""
    if not path.startswith("tests/"):
        return None
    if path.endswith(".py"):
        match = _PY_ASSERT.search(content)
        if match is None:
            return None
        weak = f"{match['pad']}assert ({match['expr']}) or True"
        return content[: match.start()] + weak + content[match.end():]
    match = _JS_EXPECT.search(content)
    if match is None:
        return None
    return content[: match.start()] + f"expect({match['expr']}).toBeDefined();" + content[
        match.end():
    ]


def _wrong_type(prop: dict[str, Any]) -> Any:
    return 12345 if prop.get("type") == "string" else f"not a {prop.get('type', 'value')}"


def malformed(
    given: dict[str, Any], schema: dict[str, Any], missing: bool
) -> dict[str, Any] | None:
    """The input with a required field left out (missing) or given the wrong type; None
    when the tool requires nothing (no mistake its schema would catch)."""
    required = [n for n in schema.get("required") or [] if n in given]
    if not required:
        return None
    name = required[0]
    bad = dict(given)
    if missing:
        del bad[name]
    else:
        prop = (schema.get("properties") or {}).get(name) or {}
        bad[name] = _wrong_type(prop if isinstance(prop, dict) else {})
    return bad
