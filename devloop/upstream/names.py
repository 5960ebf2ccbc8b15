"""How one unit's code is named by another's: a python package, a node package. Pure."""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

PY_ROOT = "units"  # python: unit `money` is the package `units.money`
NODE_SCOPE = "@units"  # node: unit `todo-db` is the package `@units/todo-db`
_LEADING = re.compile(r"^\s*([A-Za-z_$][\w$]*)")


def python_name(unit: str) -> str:
    """The identifier a unit's package has under `units`: `-` becomes `_`, a leading
    digit or a keyword gets `u`/`_` so it stays an identifier."""
    name = unit.replace("-", "_")
    if name[0].isdigit():
        name = "u" + name
    return name + "_" if keyword.iskeyword(name) else name


def python_package(unit: str) -> str:
    """`units.<name>`: the package a unit's code/ is when another unit imports it."""
    return f"{PY_ROOT}.{python_name(unit)}"


def node_package(unit: str) -> str:
    """`@units/<id>`: the package a unit's code/ is when another unit requires it."""
    return f"{NODE_SCOPE}/{unit}"


def python_module(unit: str, rel: str) -> str:
    """The dotted name of `code/<rel>.py` (or a package dir) of a unit, as imported."""
    parts = list(PurePosixPath(rel).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([python_package(unit), *parts])


def module_exports(contract: Mapping[str, Any] | None) -> dict[str, set[str] | None]:
    """`code/`-relative module path -> the names its contract entry lists (None: the
    entry is prose, such as `module.exports = app`, and names nothing one by one)."""
    exports = (contract or {}).get("exports")
    module = exports.get("module") if isinstance(exports, dict) else None
    out: dict[str, set[str] | None] = {}
    for path, entry in (module or {}).items() if isinstance(module, dict) else ():
        rel = str(path).removeprefix("code/")
        out[rel] = set(_leading_names(entry)) if isinstance(entry, dict) else None
    return out


def error_names(contract: Mapping[str, Any] | None) -> set[str]:
    """The exception names a contract's `errors` declares (each unit module may raise)."""
    exports = (contract or {}).get("exports")
    errors = exports.get("errors") if isinstance(exports, dict) else None
    return set(_leading_names(errors)) if isinstance(errors, dict) else set()


def _leading_names(entries: Iterable[Any]) -> list[str]:
    """`add(a, b)` -> add, `StockRepo.take(sku)` -> StockRepo, `DISCOUNTS` -> DISCOUNTS."""
    found = []
    for key in entries:
        match = _LEADING.match(str(key))
        if match:
            found.append(match.group(1))
    return found


def import_examples(stack: str, unit: str, contract: Mapping[str, Any] | None) -> list[str]:
    """How code imports each module `unit`'s contract lists, one statement each."""
    out = []
    for rel, names in sorted(module_exports(contract).items()):
        if stack == "python" and rel.endswith(".py"):
            taken = ", ".join(sorted(names)) if names else "..."
            out.append(f"from {python_module(unit, rel)} import {taken}")
        elif stack == "node" and not rel.endswith(".py"):
            spec = f"{node_package(unit)}/{rel}"
            if rel.endswith(".vue"):
                out.append(f"import Component from '{spec}'")
            else:
                taken = "{ " + ", ".join(sorted(names)) + " }" if names else "exported"
                out.append(f"const {taken} = require('{spec}')")
    return out
