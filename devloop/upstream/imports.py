"""What a unit's files import of other units, checked against what is there. Pure.

A problem names the file and line, the unit and the name, and the fix. They come before
any run: an import of a unit that is not among the unit's dependencies (its code is not
there), that has not passed, of a module or name its contract does not promise, or of a
dependency's module by its bare name (`from money import add`, where the package is
`units.money`).
"""

from __future__ import annotations

import ast
import bisect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from devloop.upstream.layout import UnitCode, node_main
from devloop.upstream.names import (
    NODE_SCOPE,
    PY_ROOT,
    error_names,
    module_exports,
    node_package,
    python_module,
    python_name,
    python_package,
)

# `require('@units/x/y')`, `import ... from '@units/x'`, `import('@units/x')`, `export * from`.
_NODE_SPEC = re.compile(
    r"""(?:require\s*\(\s*|\bfrom\s+|\bimport\s*\(\s*|\bimport\s+)(['"])(@units/[^'"]*)\1"""
)
# The names taken: `const { a, b: c } = require(...)`, `import { a, b as c } from ...`.
_NODE_NAMES = re.compile(
    r"""(?:const|let|var)\s*\{([^}]*)\}\s*=\s*require\s*\(\s*['"](@units/[^'"]*)['"]"""
    r"""|import\s*\{([^}]*)\}\s*from\s*['"](@units/[^'"]*)['"]"""
)
NODE_SUFFIXES = (".js", ".cjs", ".mjs", ".ts", ".mts", ".cts", ".jsx", ".tsx", ".vue", ".json")


@dataclass(frozen=True)
class Scope:
    """What a unit's files may import of other units, and what they may not."""

    unit: str
    stack: str
    present: Mapping[str, UnitCode]  # dependencies (transitive) whose passed code is there
    # dependency -> why its code is not there ("it has not passed (it is coding)")
    absent: Mapping[str, str] = field(default_factory=dict)
    # Every unit of the project -> its contract as the SDD declares it (names bare imports).
    project: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    depends_on: tuple[str, ...] = ()

    def by_python_name(self) -> dict[str, str]:
        """`units.<name>` -> unit id, for every unit of the project."""
        return {python_name(u): u for u in {*self.project, *self.present, *self.absent}}

    def whose(self, unit: str) -> str | None:
        """Why `unit`'s code is not importable here (None: it is)."""
        if unit in self.present:
            return None
        if unit in self.absent:
            return f"unit {unit}'s code is not there: {self.absent[unit]}"
        if unit not in self.project:
            return f"the project has no unit {unit}"
        if unit == self.unit:
            return f"{unit} is this unit itself: import its own modules by their names"
        return (f"unit {unit} is not among {self.unit}'s depends_on "
                f"({', '.join(self.depends_on) or 'none'}), so its code is not there")


def import_problems(scope: Scope, files: Mapping[str, str]) -> list[str]:
    """Each import of another unit in `files` (unit-relative path -> text) that cannot hold."""
    problems: list[str] = []
    own = set()
    for top in ("code", "tests"):  # both are on the tests' sys.path
        inner = {r.removeprefix(f"{top}/"): b"" for r in files if r.startswith(f"{top}/")}
        own |= UnitCode(scope.unit, inner).top_modules()
    for rel, text in sorted(files.items()):
        if scope.stack == "python" and rel.endswith(".py"):
            problems += _python(scope, rel, text, own)
        elif scope.stack == "node" and rel.endswith(NODE_SUFFIXES):
            problems += _node(scope, rel, text)
    return problems


def _python(scope: Scope, rel: str, text: str, own: set[str]) -> list[str]:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []  # the syntax check says so
    out = []
    for node in ast.walk(tree):
        where = f"{rel}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                out += _python_target(scope, where, alias.name, [], own)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [a.name for a in node.names if a.name != "*"]
            out += _python_target(scope, where, node.module, names, own)
    return out


def _python_target(
    scope: Scope, where: str, module: str, names: list[str], own: set[str]
) -> list[str]:
    parts = module.split(".")
    if parts[0] in own:
        return []  # the unit's own module (even one named like another unit's)
    if parts[0] != PY_ROOT:
        return _bare(scope, where, parts[0], module, names)
    if len(parts) == 1:  # `from units import money`
        return [p for n in names
                for p in _python_target(scope, where, f"{PY_ROOT}.{n}", [], own)]
    unit = scope.by_python_name().get(parts[1], parts[1])
    why = scope.whose(unit)
    if why:
        return [f"{where}: imports {module}: {why}; fix: {_fix_absent(scope, unit)}"]
    code = scope.present[unit]
    exports = module_exports(code.contract)
    promised = error_names(code.contract)
    if len(parts) == 2:  # the package: its re-exported names, or its modules
        modules = {PurePosixPath(r).stem for r in exports if r.endswith(".py")}
        for listed in exports.values():
            promised |= listed or set()
        unknown = [n for n in names if n not in promised and n not in modules]
        if unknown and all(v is not None for v in exports.values()):
            return [_unpromised(where, unit, module, unknown, promised | modules)]
        return []
    rel = _python_file(code, parts[2:])
    if rel is None:
        have = sorted(python_module(unit, r) for r in code.files if r.endswith(".py"))
        return [f"{where}: imports {module}: unit {unit} has no such module (it has "
                f"{', '.join(have) or 'none'}); fix: import one of those"]
    if rel not in exports:
        lists = ", ".join(python_module(unit, r) for r in sorted(exports)) or "none"
        return [f"{where}: imports {module}: unit {unit}'s contract does not list "
                f"code/{rel} (it lists {lists}); fix: import what the contract exports"]
    names_listed = exports[rel]
    if names_listed is None:
        return []
    unknown = [n for n in names if n not in names_listed | promised]
    return [_unpromised(where, unit, module, unknown, names_listed | promised)] if unknown else []


def _python_file(code: UnitCode, parts: list[str]) -> str | None:
    """The code/-relative file a dotted path names inside a unit, if it has one."""
    base = "/".join(parts)
    for rel in (f"{base}.py", f"{base}/__init__.py"):
        if rel in code.files:
            return rel
    if any(r.startswith(base + "/") for r in code.files):
        return f"{base}/__init__.py"  # a namespace package: nothing listed to check
    return None


def _bare(scope: Scope, where: str, top: str, module: str, names: list[str]) -> list[str]:
    """`from money import add` where money is another unit's module, not one of ours."""
    if top in sys.stdlib_module_names:
        return []
    for unit, contract in sorted(scope.project.items()):
        if unit == scope.unit:
            continue
        modules = {PurePosixPath(r).stem: r for r in module_exports(contract) if r.endswith(".py")}
        if top in modules:
            dotted = module.replace(top, f"{python_package(unit)}.{top}", 1)
            taken = ", ".join(names) if names else None
            fix = (f"from {dotted} import {taken} (or from {python_package(unit)} import "
                   f"{taken})" if taken else f"import {dotted}")
            why = scope.whose(unit)
            return [f"{where}: imports {module}, which is unit {unit}'s module code/"
                    f"{modules[top]}; a unit's code is imported as its package, "
                    f"{python_package(unit)}" + (f"; but {why}" if why else "")
                    + f"; fix: {fix if not why else _fix_absent(scope, unit)}"]
    return []


def _unpromised(where: str, unit: str, module: str, names: list[str], promised: set[str]) -> str:
    return (f"{where}: imports {', '.join(names)} from {module}: unit {unit}'s contract does "
            f"not export {'it' if len(names) == 1 else 'them'} (it exports "
            f"{', '.join(sorted(promised)) or 'nothing by name'}); fix: use what the "
            "contract exports, or ask for the contract to change")


def _fix_absent(scope: Scope, unit: str) -> str:
    if unit in scope.absent:
        return f"wait for {unit} to pass (DevLoop runs this unit after it), or do not import it"
    return (f"do not import {unit}; what this unit needs of another comes from a unit in "
            "its depends_on (or is passed in as a parameter)")


def _node(scope: Scope, rel: str, text: str) -> list[str]:
    out = []
    lines = _line_of(text)
    for match in _NODE_SPEC.finditer(text):
        where = f"{rel}:{lines(match.start())}"
        out += _node_target(scope, where, match.group(2))
    for match in _NODE_NAMES.finditer(text):
        raw, spec = (match.group(1), match.group(2)) if match.group(2) else match.groups()[2:]
        names = [re.split(r"\s*(?::|\bas\b)\s*", n.strip())[0] for n in raw.split(",")]
        out += _node_names(scope, f"{rel}:{lines(match.start())}", spec, [n for n in names if n])
    return out


def _node_split(spec: str) -> tuple[str, str]:
    """`@units/todo-db/db.js` -> (todo-db, db.js); `@units/todo-db` -> (todo-db, "")."""
    rest = spec[len(NODE_SCOPE) + 1 :]
    unit, _, path = rest.partition("/")
    return unit, path


def _node_file(code: UnitCode, path: str) -> str | None:
    """The code/-relative file a specifier's path names (node's extension rules)."""
    if not path:
        return node_main(code)
    candidates = [path] + [path + s for s in (".js", ".cjs", ".mjs", ".json")]
    candidates += [f"{path}/index.js"]
    return next((c for c in candidates if c in code.files), None)


def _node_target(scope: Scope, where: str, spec: str) -> list[str]:
    unit, path = _node_split(spec)
    why = scope.whose(unit)
    if why:
        return [f"{where}: requires {spec}: {why}; fix: {_fix_absent(scope, unit)}"]
    code = scope.present[unit]
    rel = _node_file(code, path)
    exports = module_exports(code.contract)
    if rel is None:
        listed = ", ".join(f"{node_package(unit)}/{r}" for r in sorted(exports)) or "none"
        what = "no such module" if path else "no single module to be its main"
        return [f"{where}: requires {spec}: unit {unit} has {what} (its contract lists "
                f"{listed}); fix: require one of those by its path"]
    if rel not in exports and not rel.endswith(".json"):
        listed = ", ".join(f"{node_package(unit)}/{r}" for r in sorted(exports)) or "none"
        return [f"{where}: requires {spec}: unit {unit}'s contract does not list code/{rel} "
                f"(it lists {listed}); fix: require what the contract exports"]
    return []


def _node_names(scope: Scope, where: str, spec: str, names: list[str]) -> list[str]:
    unit, path = _node_split(spec)
    code = scope.present.get(unit)
    if code is None:
        return []  # _node_target said so
    rel = _node_file(code, path)
    listed = module_exports(code.contract).get(rel or "")
    if listed is None:
        return []
    promised = listed | error_names(code.contract)
    unknown = [n for n in names if n not in promised]
    return [_unpromised(where, unit, spec, unknown, promised)] if unknown else []


def _line_of(text: str) -> Callable[[int], int]:
    """A function from a character offset to its 1-based line number."""
    starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    return lambda offset: bisect.bisect_right(starts, offset)
