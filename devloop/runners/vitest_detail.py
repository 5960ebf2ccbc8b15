"""Failure detail for vitest runs, from the errors `vitest_reporter.mjs` sends on the channel.

vitest's JSON report keeps only each error's `stack`, which loses what the error object
held: vitest 3 builds a test's timeout error with the stack of an `Error('STACK_TRACE_ERROR')`
made when the test was defined (the stack says STACK_TRACE_ERROR, the message says
"Test timed out in 200ms."), and it prints nested values elided (`{ items: [ …(2) ] }`)
in the message while `expected`, `actual` and `diff` hold them whole. Suites whose
beforeAll/afterAll hook threw are not in the report at all. The reporter sends those
errors (`errors` and `hook` records); this module turns them into stacks, values and
failures. It is detail only: the verdict never depends on it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

VALUE_CAP = 2000  # characters of an expected/got value kept in a Failure
DIFF_CAP = 1500  # characters of vitest's diff kept in a failure's stack
_FRAME_LINE = re.compile(r"^\s+at ")
_ELIDED = "…"  # vitest's mark for a part of a value it left out of a message
# Pretty-format's prototypes ("Object {", "Array [") and trailing commas, outside strings.
_PRETTY = re.compile(r'"(?:[^"\\\n]|\\.)*"|\b(?:Object|Array) (?=[{\[])|,(?=\s*[}\]])')
TYPE_TESTS = re.compile(r"\.(?:test|spec)-d\.[cm]?[jt]sx?$")


@dataclass
class Details:
    """What the reporter sent beside the verdict: errors per test, and failed hooks."""

    # (file relative to the unit, full name "a > b > test") -> each same-named test's errors
    errors: dict[tuple[str, str], list[list[dict[str, Any]]]] = field(default_factory=dict)
    hooks: list[dict[str, Any]] = field(default_factory=list)

    def take(self, file: str, name: str) -> list[dict[str, Any]]:
        """The errors of the next test of this file and name (in the order they ran)."""
        queue = self.errors.get((file, name)) or []
        return queue.pop(0) if queue else []


def details(records: list[dict[str, Any]], relative: Callable[[str], str]) -> Details:
    """Collect the reporter's `errors` and `hook` records (malformed ones are ignored)."""
    out = Details()
    for rec in records:
        if rec.get("e") not in ("errors", "hook") or not isinstance(rec.get("errors"), list):
            continue
        errors = [e for e in rec["errors"] if isinstance(e, dict)]
        module = relative(str(rec.get("module")))
        if rec.get("e") == "errors":
            out.errors.setdefault((module, str(rec.get("name"))), []).append(errors)
        elif rec.get("e") == "hook":
            out.hooks.append({**rec, "module": module, "errors": errors})
    return out


def error_text(errors: list[dict[str, Any]]) -> str:
    """The errors as one stack text: each error's own message (never the STACK_TRACE_ERROR
    placeholder its stack may start with), vitest's diff, then the stack's frames."""
    blocks = []
    for error in errors:
        head = f"{error.get('name') or 'Error'}: {error.get('message') or ''}".rstrip()
        stack = str(error.get("stack") or "")
        frames = [ln for ln in stack.splitlines() if _FRAME_LINE.match(ln)]
        diff = str(error.get("diff") or "").strip()
        if diff:
            head += "\n\n" + capped(diff, DIFF_CAP, error.get("diffLength")) + "\n"
        blocks.append("\n".join([head, *frames]))
    return "\n\n".join(blocks)


def capped(text: str, cap: int, length: Any = None) -> str:
    """text cut at cap characters, saying so and how long it was."""
    full = length if isinstance(length, int) and length > len(text) else len(text)
    if full <= cap:
        return text
    return f"{text[:cap]} … [cut: the first {cap} of {full} characters]"


def elided(value: Any) -> bool:
    """Whether a value read from a message is vitest's shortened print of it (or absent)."""
    return value is None or (isinstance(value, str) and _ELIDED in value)


def whole_value(error: dict[str, Any], key: str) -> Any:
    """The whole `expected` / `actual` of an error: a JSON value when vitest's print of it is
    one (objects, arrays, numbers), else the print itself; capped at VALUE_CAP, saying so."""
    text = error.get(key)
    if not isinstance(text, str):
        return None
    length = error.get(f"{key}Length")
    value = _as_json(text) if not isinstance(length, int) else None
    if value is not None and len(json.dumps(value, ensure_ascii=False)) <= VALUE_CAP:
        return value
    return capped(text, VALUE_CAP, length)


def _as_json(text: str) -> Any:
    """A pretty-format print (`Object {\\n  "a": 1,\\n}`) as the JSON value it spells, or None."""
    plain = _PRETTY.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)
    try:
        value = json.loads(plain)
    except ValueError:
        return None
    return value if isinstance(value, dict | list) else None


def hook_name(hook: dict[str, Any]) -> str:
    """`tests/x.test.js::suite > beforeAll hook` (the file's own hooks: `::beforeAll hook`)."""
    names = [str(h) for h in hook.get("hooks") or [] if h in ("beforeAll", "afterAll")]
    what = f"{'/'.join(names) or 'beforeAll/afterAll'} hook"
    suite = str(hook.get("suite") or "")
    return f"{hook.get('module')}::{suite + ' > ' if suite else ''}{what}"


def hook_lead(hook: dict[str, Any]) -> str:
    """The hint's first sentence for a failed hook: which hook, and what it kept from running."""
    names = [str(h) for h in hook.get("hooks") or []]
    suite = f"suite `{hook['suite']}`" if hook.get("suite") else f"file {hook.get('module')}"
    if names == ["afterAll"]:
        return f"The afterAll hook of {suite} threw after its tests ran (its clean-up failed). "
    return f"The {'/'.join(names) or 'beforeAll'} hook of {suite} threw, so its tests never ran. "


def type_test_files(paths: list[str]) -> list[str]:
    """The unit's type tests (`tests/**/*.test-d.ts`), which `vitest --typecheck` runs."""
    return [p for p in paths if p.startswith("tests/") and TYPE_TESTS.search(p)]
