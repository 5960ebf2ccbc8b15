"""Mutants of a python module: one small change each, found by the `ast` module. Pure.

The operators are the classic ones (mutmut's and cosmic-ray's core): an arithmetic or a
comparison operator swapped for its neighbour, `and` for `or`, a `not` dropped, an int
one off, a boolean flipped. A test suite that still passes on a mutant did not notice
the change: the share of mutants it fails on (kills) is its mutation score.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult,
        ast.Div: ast.Mult, ast.Mod: ast.FloorDiv}  # fmt: skip
_CMP = {ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt, ast.Eq: ast.NotEq,
        ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
        ast.NotIn: ast.In}  # fmt: skip
_BOOL = {ast.And: ast.Or, ast.Or: ast.And}


@dataclass(frozen=True)
class Mutant:
    """One mutant: where it changes the module, what it changes, and the new source."""

    line: int
    change: str
    source: str


def _sites(tree: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Every node an operator can change, with what it would do, in a stable order."""
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
            yield node, f"{type(node.op).__name__} -> {_BIN[type(node.op)].__name__}"
        elif isinstance(node, ast.Compare) and type(node.ops[0]) in _CMP:
            yield node, f"{type(node.ops[0]).__name__} -> {_CMP[type(node.ops[0])].__name__}"
        elif isinstance(node, ast.BoolOp):
            yield node, f"{type(node.op).__name__} -> {_BOOL[type(node.op)].__name__}"
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node, "not dropped"
        elif isinstance(node, ast.Constant) and isinstance(node.value, int):
            yield node, f"{node.value!r} -> {_changed(node.value)!r}"


def _changed(value: int) -> int:
    """An int one up, a boolean flipped."""
    return (not value) if isinstance(value, bool) else value + 1


class _Apply(ast.NodeTransformer):
    """Changes the one node at `target` (its position in the walk's order)."""

    def __init__(self, target: ast.AST) -> None:
        self.target = target

    def visit(self, node: ast.AST) -> ast.AST:
        if node is not self.target:
            return super().visit(node)
        if isinstance(node, ast.BinOp):
            node.op = _BIN[type(node.op)]()
        elif isinstance(node, ast.Compare):
            node.ops = [_CMP[type(node.ops[0])](), *node.ops[1:]]
        elif isinstance(node, ast.BoolOp):
            node.op = _BOOL[type(node.op)]()
        elif isinstance(node, ast.UnaryOp):
            return node.operand
        elif isinstance(node, ast.Constant) and isinstance(node.value, int):
            node.value = _changed(node.value)
        return node


def count(source: str) -> int:
    """How many mutants the module has (0 when it does not parse)."""
    try:
        return sum(1 for _ in _sites(_code_only(ast.parse(source))))
    except (SyntaxError, ValueError, RecursionError):
        return 0


def mutant(source: str, index: int) -> Mutant:
    """The module's mutant number `index` (of `count(source)`)."""
    tree = _code_only(ast.parse(source))
    node, change = list(_sites(tree))[index]
    line = getattr(node, "lineno", 0)
    mutated = _Apply(node).visit(tree)
    return Mutant(line, change, ast.unparse(ast.fix_missing_locations(mutated)) + "\n")


def _code_only(tree: ast.Module) -> ast.Module:
    """The module without docstrings, whose constants are no behaviour to mutate."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body[0] = ast.Pass()
    return tree
