"""build_hint, table-driven: every pattern names what went wrong and where to look."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devloop.runners import PytestRunner
from devloop.runners.base import with_source
from devloop.runners.hints import build_hint, is_useful_hint
from devloop.sandbox import BwrapSandbox

MakeView = Callable[[str], Path]

JS_ROUTE = "/project/units/todo-be/code/server.js"


@dataclass(frozen=True)
class Case:
    """One failure and the phrases its hint must contain."""

    id: str
    expected: Any
    got: Any
    stack: str
    wants: tuple[str, ...]
    test: str = "a test"


CASES = [
    Case(
        "undefined-property-400-vs-500",
        400,
        500,
        "AssertionError: expected 500 to be 400 // Object.is equality\n"
        "    at /project/units/todo-be/tests/todo.spec.js:12:22\n\n"
        "server answered 500 during this test:\n"
        "TypeError: Cannot read properties of undefined (reading 'length')\n"
        f"    at {JS_ROUTE}:12:22\n"
        "source: code/server.js:12: if (req.body.title.length === 0) return res.status(400);",
        ("400", "`req.body.title` is undefined", "`.length`", "code/server.js:12"),
    ),
    Case(
        "undefined-property-in-a-plain-call",
        None,
        None,
        "TypeError: Cannot read properties of undefined (reading 'trim')\n"
        "    at create (/project/units/todo-be/code/service.js:3:20)\n"
        "source: code/service.js:3: const title = input.title.trim();",
        ("`input.title` is undefined", "`.trim`", "code/service.js:3", "check that"),
    ),
    Case(
        "null-property-401-vs-500",
        401,
        500,
        "AssertionError: expected 500 to be 401\n\nserver answered 500 during this test:\n"
        "TypeError: Cannot read properties of null (reading 'password_hash')\n"
        "    at login (/project/units/auth-be/code/auth.js:9:41)\n"
        "source: code/auth.js:9: return bcrypt.compare(pw, user.password_hash);",
        ("401", "`user` is null", "password_hash", "code/auth.js:9"),
    ),
    Case(
        "404-vs-200",
        404,
        200,
        "AssertionError: expected 200 to be 404 // Object.is equality\n"
        "    at /project/units/todo-be/tests/todo.spec.js:30:22",
        ("404", "200", "lookup", "tests/todo.spec.js:30"),
    ),
    Case(
        "404-vs-500",
        404,
        500,
        "AssertionError: expected 500 to be 404\n\nserver answered 500 during this test:\n"
        "TypeError: Cannot read properties of undefined (reading 'title')\n"
        f"    at {JS_ROUTE}:20:18\n"
        "source: code/server.js:20: res.json({ title: row.title });",
        ("404", "`row` is undefined", "code/server.js:20"),
    ),
    Case(
        "201-vs-500-names-the-error",
        201,
        500,
        "AssertionError: expected 500 to be 201\n\nserver answered 500 during this test:\n"
        f"ReferenceError: db is not defined\n    at {JS_ROUTE}:7:3",
        ("201", "500", "ReferenceError: db is not defined", "code/server.js:7"),
    ),
    Case(
        "sqlite-unique-409-vs-500",
        409,
        500,
        "AssertionError: expected 500 to be 409\n\nserver answered 500 during this test:\n"
        "SqliteError: UNIQUE constraint failed: users.email\n"
        "    at /project/units/users-be/code/users.js:12:8",
        ("UNIQUE constraint on users.email", "existing row", "409", "code/users.js:12"),
    ),
    Case(
        "sqlite-not-null-400-vs-500",
        400,
        500,
        "AssertionError: expected 500 to be 400\n\nserver answered 500 during this test:\n"
        "SqliteError: NOT NULL constraint failed: todos.title\n"
        "    code: 'SQLITE_CONSTRAINT_NOTNULL'\n"
        f"    at {JS_ROUTE}:14:40",
        ("NOT NULL constraint on todos.title", "answer 400", "code/server.js:14"),
    ),
    Case(
        "sqlite-foreign-key",
        None,
        None,
        "SqliteError: FOREIGN KEY constraint failed\n    code: 'SQLITE_CONSTRAINT_FOREIGNKEY'\n"
        "    at addTag (/project/units/tags-be/code/tags.js:5:10)",
        ("FOREIGN KEY constraint", "referenced row exists", "code/tags.js:5"),
    ),
    Case(
        "timeout",
        None,
        None,
        "Error: Test timed out in 5000ms.\nIf this is a long-running test, pass a timeout value "
        'as the last argument or configure it globally with "testTimeout".',
        ("timed out after 5000 ms (its own time limit)", "`await`", "mocked"),
        test="GET /api/todos lists todos",
    ),
    Case(
        "python-none-attribute",
        None,
        None,
        "    def create(store, payload):\n>       return item.title.upper()\n"
        "E       AttributeError: 'NoneType' object has no attribute 'title'\n\n"
        "code/todo.py:7: AttributeError\nsource: code/todo.py:7: return item.title.upper()",
        ("`item` is None", "`.title`", "code/todo.py:7"),
    ),
    Case(
        "python-key-error",
        None,
        None,
        ">       title = payload['title']\nE       KeyError: 'title'\n\n"
        "code/todo.py:4: KeyError\nsource: code/todo.py:4: title = payload['title']",
        ("`payload['title']` raised KeyError", ".get('title')", "code/todo.py:4"),
    ),
    Case(
        "python-status-assertion",
        400,
        500,
        ">       assert r.status_code == 400\nE       assert 500 == 400\n"
        "E        +  where 500 = <WrapperTestResponse streamed [500 INTERNAL SERVER ERROR]>"
        ".status_code\n\ntests/test_api.py:14: AssertionError\n"
        "source: tests/test_api.py:14: assert r.status_code == 400",
        ("400", "500", "tests/test_api.py:14"),
    ),
    Case(
        "python-module-not-found",
        None,
        None,
        "tests/test_client.py:1: in <module>\n    from client import fetch\n"
        "code/client.py:1: in <module>\n    import requests\n"
        "E   ModuleNotFoundError: No module named 'requests'",
        ("`requests` cannot be found", "code/client.py:1", "under code/"),
    ),
    Case(
        "python-import-name",
        None,
        None,
        "tests/test_todo.py:1: in <module>\n    from todo import create\n"
        "E   ImportError: cannot import name 'create' from 'todo' (/project/units/u/code/todo.py)",
        ("`create`", "`todo`", "define"),
    ),
    Case(
        "js-not-a-function",
        201,
        500,
        "AssertionError: expected 500 to be 201\n\nserver answered 500 during this test:\n"
        f"TypeError: service.create is not a function\n    at {JS_ROUTE}:8:20",
        ("`service.create` is not a function", "export", "code/server.js:8", "201"),
    ),
    Case(
        "400-vs-201-missing-validation",
        400,
        201,
        "AssertionError: expected 201 to be 400\n    at /project/units/u/tests/a.spec.js:9:22",
        ("accepted with 201", "validation", "tests/a.spec.js:9"),
    ),
    Case(
        "fallback-values-with-a-code-frame",
        3,
        4,
        "AssertionError: expected 4 to be 3\n    at total (/project/units/u/code/cart.js:2:10)\n"
        "source: code/cart.js:2: return items.length + 1;",
        ("got 4 where 3 was expected", "code/cart.js:2", "`return items.length + 1;`"),
        test="cart total counts items",
    ),
    Case(
        "fallback-values-without-a-code-frame",
        "b",
        "a",
        "AssertionError: expected 'a' to be 'b'\n    at /project/units/u/tests/a.spec.js:5:10",
        ("got 'a' where 'b' was expected", "tests/a.spec.js:5"),
    ),
    Case(
        "python-assertion-with-its-values-and-the-code-it-calls",
        "None",
        "<money.Money object at 0x7f>",
        "def test_money_of_nothing_is_none():\n"
        ">       assert money.Money(None, None) is None\n"
        "E       AssertionError: assert <money.Money object at 0x7f> is None\n\n"
        "tests/test_money.py:5: AssertionError\n"
        "source: tests/test_money.py:5: assert money.Money(None, None) is None\n"
        "calls: code/money.py:4: class Money:",
        ("`assert money.Money(None, None) is None` failed at tests/test_money.py:5",
         "got <money.Money object at 0x7f> where None was expected (from "
         "`money.Money(None, None)`)",
         "`Money` at code/money.py:4 (`class Money:`)"),
    ),
    Case(
        "python-failure-without-values-never-quotes-the-def-line",
        None,
        None,
        "def test_it():\n>       helper()\nE       Failed: DID NOT RAISE\n\n"
        "tests/test_it.py:3: Failed",
        ('failed with "Failed: DID NOT RAISE"',),
        test="tests/test_it.py::test_it",
    ),
    Case(
        "fallback-no-values-no-frames",
        None,
        None,
        "something odd happened",
        ('`a test` failed with "something odd happened"', "code/"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_pattern_names_the_cause_and_the_place(case: Case) -> None:
    hint = build_hint(case.test, case.expected, case.got, case.stack)
    for want in case.wants:
        assert want in hint, f"{want!r} missing from: {hint}"
    # A fallback draft says where to start; the tester's self-check wants it improved.
    draft = case.id.startswith("fallback") or case.id.startswith("python-failure-without")
    assert is_useful_hint(hint) is not draft, hint
    assert "fix the bug" not in hint.lower()
    assert hint.count(". ") <= 2, f"more than two sentences: {hint}"


def test_the_seed_example_names_req_body_title(tmp_path: Path) -> None:
    (tmp_path / "code").mkdir()
    (tmp_path / "code/server.js").write_text(
        "const app = require('express')();\n"
        "app.post('/api/todos', (req, res) => {\n"
        "  if (req.body.title.length > 200) return res.status(400).end();\n"
        "});\n"
    )
    stack = with_source(
        "AssertionError: expected 500 to be 400\n\nserver answered 500 during this test:\n"
        "TypeError: Cannot read properties of undefined (reading 'length')\n"
        f"    at {JS_ROUTE.replace('/todo-be/', '/x/')}:3:22",
        tmp_path,
    )
    assert "source: code/server.js:3: if (req.body.title.length > 200)" in stack
    hint = build_hint("missing body title -> 400", 400, 500, stack)
    assert "`req.body.title` is undefined" in hint and "answer 400" in hint


def test_source_lines_are_never_read_outside_the_unit(tmp_path: Path) -> None:
    (tmp_path / "unit").mkdir()
    (tmp_path / "secret.py").write_text("TOKEN = 'hunter2'\n")
    stack = "E   KeyError: 'x'\ncode/../../secret.py:1: KeyError"
    assert "hunter2" not in with_source(stack, tmp_path / "unit")


@pytest.mark.parametrize(
    ("hint", "useful"),
    [
        ("", False),
        (None, False),
        ("fix the bug", False),
        ("Please fix the bug in the route.", False),
        ("expected 401 got 500", False),
        ("Expected 400, got 500.", False),
        ("expected: 400 received: 500", False),
        ("todo", False),
        ("`req.body.title` is undefined when the body is empty: check it and answer 400.", True),
        ("The lookup returns None for unknown ids; answer 404 before reading .title.", True),
    ],
)
def test_is_useful_hint_rejects_empty_lazy_and_bare_hints(hint: str | None, useful: bool) -> None:
    assert is_useful_hint(hint) is useful


def test_exceptions_with_a_module_prefix_are_named_by_real_pytest_failures(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    # Invariant: an exception class is recognised by its last dotted name, so the hint
    # names what was raised (never "it was false", never the StopIteration it replaced).
    view = make_view("python/edge")
    out = PytestRunner(sandbox, python_toolchain_dir).run(
        view=view, unit_id="edge", run_id="run-1", attempt=1, retry_budget_left=3
    )
    hints = {f.test.rsplit("::", 1)[-1]: f.hint for f in out.result.failures}
    assert out.result.summary.failed == 3, out.result.crash_reason
    empty = hints["test_first_of_empty_is_none"]
    assert empty.startswith("edge.EdgeError: no items to take the first of was raised at ")
    assert "code/edge/__init__.py:17" in empty and "StopIteration" not in empty
    invalid = hints["test_checked_zero_is_zero"]
    assert invalid.startswith("edge.Invalid: not positive: 0 was raised at code/edge/__init__.py")
    url = hints["test_a_bare_host_has_no_scheme"]
    assert url.startswith("links.urlutils.URLParseError: expected a scheme in 'example.com'")
    assert "code/links/urlutils.py:11" in url
    for hint in hints.values():
        assert "it was false" not in hint and is_useful_hint(hint)
