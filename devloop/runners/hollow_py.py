"""A hollow build of a python module: the same names, every function doing nothing. Pure.

Each function, method, constructor and lambda of the module gets a guard as its first
statement: while a test body runs (pytest's PYTEST_CURRENT_TEST ends in "(call)") it
returns at once, with a value no test can use (not None, equal to nothing, neither true
nor false: `is None`, `== 0` and `assert f()` all fail on it; dunder methods return
None, generators yield nothing); at import time, in fixtures and in collection it runs
as written,
so set-up that builds objects still works and only what a test itself calls is hollow.
A test that passes against this build passes whatever the code does: it proves nothing.
Parsing never runs the code.
"""

from __future__ import annotations

import ast

from devloop.core.errors import DevLoopError

GUARD = "__devloop_hollow__"
NOTHING = "__devloop_nothing__"
_PRELUDE = f"""\
def {GUARD}():
    import os as _os
    return _os.environ.get("PYTEST_CURRENT_TEST", "").endswith("(call)")


class __devloop_hollow_value__:
    __slots__ = ()

    def __bool__(self):
        raise TypeError("a hollow build's value is neither true nor false")

    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = object.__hash__

    def __repr__(self):
        return "<nothing: a hollow build>"


{NOTHING} = __devloop_hollow_value__()
"""


class HollowError(DevLoopError, ValueError):
    """The module cannot be hollowed (it does not parse)."""


def hollow_python(source: str, path: str = "<code>") -> str:
    """The module's hollow build (raises HollowError when it does not parse)."""
    try:
        tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise HollowError(f"{path} does not parse: {exc}") from exc
    tree = _Hollow().visit(tree)
    assert isinstance(tree, ast.Module)
    head = _leading(tree.body)
    prelude = ast.parse(_PRELUDE).body
    tree.body = tree.body[:head] + prelude + tree.body[head:]
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


def _leading(body: list[ast.stmt]) -> int:
    """How many statements must stay first: the docstring and `from __future__` imports."""
    at = 0
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        at = 1
    while at < len(body) and isinstance(body[at], ast.ImportFrom):
        node = body[at]
        assert isinstance(node, ast.ImportFrom)
        if node.module != "__future__":
            break
        at += 1
    return at


def _guard_call() -> ast.expr:
    return ast.Call(func=ast.Name(id=GUARD, ctx=ast.Load()), args=[], keywords=[])


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _nothing() -> ast.expr:
    return ast.Name(id=NOTHING, ctx=ast.Load())


def _yields(node: ast.AST) -> bool:
    """Whether a function's own body (not a nested one's) yields: a generator."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.Yield | ast.YieldFrom):
            return True
        if not isinstance(child, _SCOPES):
            stack.extend(ast.iter_child_nodes(child))
    return False


class _Hollow(ast.NodeTransformer):
    """Puts the guard first in every function body and every lambda."""

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        self.generic_visit(node)
        body = list(node.body)
        doc = (
            1
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            else 0
        )
        dunder = node.name.startswith("__") and node.name.endswith("__")
        value = None if dunder or _yields(node) else _nothing()
        guard = ast.If(test=_guard_call(), body=[ast.Return(value=value)], orelse=[])
        node.body = body[:doc] + [guard] + body[doc:]
        return node

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        self.generic_visit(node)
        node.body = ast.IfExp(test=_guard_call(), body=_nothing(), orelse=node.body)
        return node
