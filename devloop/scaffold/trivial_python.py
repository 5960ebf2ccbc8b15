"""Trivial python code and pytest tests for a unit: honest (the tests call the code), minimal.

The contract's `module` exports name the files and functions: `{"code/stock.py":
{"reserve(sku, qty)": "-> bool"}}` becomes `def reserve(sku, qty) -> bool: return True`,
and each acceptance criterion gets a test asserting what one of them returns. Without
such exports the unit gets `code/<unit>.py` with `ready() -> str`. Declared HTTP
statuses get `respond(status)` and one test each, as the tester's self-check requires.
"""

from __future__ import annotations

import keyword
import re
import sys
from dataclasses import dataclass
from typing import Any

from devloop.scaffold.trivial_common import TrivialUnit, declared_statuses, slug
from devloop.upstream.names import python_package

# Names tests cannot import code/ as: the stdlib, and what pytest itself imports.
TAKEN = frozenset(sys.stdlib_module_names) | {
    "pytest",
    "_pytest",
    "pluggy",
    "iniconfig",
    "packaging",
    "py",
    "conftest",
}
_LEADING = re.compile(r"^\s*([A-Za-z_]\w*)")
_SIGNATURE = re.compile(r"^\s*([A-Za-z_]\w*)\s*\((.*)\)\s*(?:->\s*(.+?))?\s*$", re.S)
# Return type word -> (annotation, the constant returned, the test's comparison).
_VALUES = {
    "bool": ("bool", "True", "is True"),
    "int": ("int", "0", "== 0"),
    "float": ("float", "0.0", "== 0.0"),
    "dict": ("dict", "{}", "== {}"),
    "list": ("list", "[]", "== []"),
}


@dataclass(frozen=True)
class PyFunction:
    """One function to write and to call from a test."""

    module: str
    name: str
    params: str
    annotation: str
    value: str
    check: str
    call_args: str


def _identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def _module_name(rel: str) -> str | None:
    """code/shop/stock.py -> shop.stock (None when tests could not import it by that name)."""
    if not (rel.startswith("code/") and rel.endswith(".py")):
        return None
    parts = rel[len("code/") : -len(".py")].split("/")
    if not all(_identifier(p) for p in parts) or parts[0] in TAKEN:
        return None
    return ".".join(parts)


def _params(text: str) -> tuple[str, int] | None:
    """(parameters with every default as None, count of required positionals), or None."""
    out: list[str] = []
    required = 0
    for raw in (p.strip() for p in text.split(",") if p.strip()):
        name = raw.split("=")[0].split(":")[0].strip()
        bare = name.lstrip("*")
        if name in ("*", "/") or (name.startswith("*") and _identifier(bare)):
            out.append(name)
        elif not _identifier(name):
            return None
        elif "=" in raw or any(p.startswith("*") for p in out):
            out.append(f"{name}=None")
        else:
            out.append(name)
            required += 1
    return ", ".join(out), required


def _returns(declared: str, unit_id: str) -> tuple[str, str, str]:
    """(annotation, value, comparison) for a declared return type like `-> bool`."""
    word = re.sub(r"[^a-z].*", "", declared.strip().removeprefix("->").strip().lower())
    if word == "str":
        return "str", repr(unit_id), f"== {unit_id!r}"
    return _VALUES.get(word, ("None", "None", "is None"))


def functions(unit_id: str, contract: dict[str, Any]) -> list[PyFunction]:
    """The plain functions the contract's python `module` exports declare, once each."""
    modules = (contract.get("exports") or {}).get("module")
    found: dict[tuple[str, str], PyFunction] = {}
    for rel, members in modules.items() if isinstance(modules, dict) else ():
        module = _module_name(str(rel))
        if module is None or not isinstance(members, dict):
            continue
        for key, doc in members.items():
            match = _SIGNATURE.match(str(key))
            parsed = _params(match.group(2)) if match else None
            if match is None or parsed is None or not _identifier(match.group(1)):
                continue  # methods (Repo.add), classes and odd signatures are left out
            declared = match.group(3) or (str(doc) if str(doc).lstrip().startswith("->") else "")
            annotation, value, check = _returns(declared, unit_id)
            params, required = parsed
            name = match.group(1)
            found.setdefault(
                (module, name),
                PyFunction(
                    module, name, params, annotation, value, check, ", ".join(["None"] * required)
                ),
            )
    return list(found.values())


def _doc(text: str) -> str:
    """A docstring literal for text: triple-quoted when that is safe, else its repr."""
    return f'"""{text}"""' if not re.search(r'["\\]', text) else repr(text)


def _default_module(unit_id: str) -> str:
    name = slug(unit_id) or "unit"
    name = name if name[0].isalpha() else f"unit_{name}"
    clash = name in TAKEN or keyword.iskeyword(name)
    return f"{name}_unit" if clash else name


def upstream_imports(contract: dict[str, Any], upstream: dict[str, dict[str, Any]]) -> list[str]:
    """`from units.money import add` for each name the contract consumes that the
    dependency's trivial code defines: the stand-in imports what it would use."""
    lines = []
    for entry in contract.get("consumes") or []:
        dep = entry.get("unit") if isinstance(entry, dict) else None
        if dep not in upstream:
            continue
        wanted = [*_as_list(entry.get("uses")), *_as_list(entry.get("module"))]
        defined = {f.name for f in functions(dep, upstream[dep])}
        names = sorted({m.group(1) for w in wanted if (m := _LEADING.match(w))} & defined)
        if names:
            lines.append(f"from {python_package(dep)} import {', '.join(names)}  # noqa: F401")
    return lines


def _as_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []


def python_unit(
    unit_id: str,
    contract: dict[str, Any],
    acceptance: list[str],
    upstream: dict[str, dict[str, Any]] | None = None,
) -> TrivialUnit:
    """The trivial code and tests of a python unit (`upstream`: its dependencies' contracts)."""
    value = repr(unit_id)
    ready = PyFunction(_default_module(unit_id), "ready", "", "str", value, f"== {value}", "")
    funcs = functions(unit_id, contract) or [ready]
    statuses = declared_statuses(contract)
    defs: dict[str, list[str]] = {}
    for f in funcs:
        defs.setdefault(f.module, []).append(
            f"def {f.name}({f.params}) -> {f.annotation}:\n"
            f"    {_doc(f'Trivial stand-in: always {f.value}.')}\n"
            f"    return {f.value}\n"
        )
    first = funcs[0].module
    if statuses:
        defs[first].append(
            f"STATUSES = {tuple(statuses)!r}\n\n\n"
            "def respond(status: int) -> int:\n"
            '    """The status when the contract declares it, else 500."""\n'
            "    return status if status in STATUSES else 500\n"
        )
    imports = upstream_imports(contract, upstream or {})
    code = {
        "code/" + m.replace(".", "/") + ".py": _doc(f"{unit_id}: a trivial implementation.")
        + ("\n\n" + "\n".join(imports) if imports and m == first else "")
        + "\n\n\n"
        + "\n\n".join(body)
        for m, body in defs.items()
    }
    # Module-qualified calls: two modules may export functions of the same name.
    lines = [_doc(f"{unit_id}: one test per acceptance criterion and per declared status."), ""]
    lines += [f"import {m}" for m in sorted(defs)]
    for i, criterion in enumerate(acceptance):
        f = funcs[i % len(funcs)]
        lines += [
            "",
            "",
            f"def test_{i + 1:02d}_{slug(criterion)[:60]}() -> None:",
            f"    {criterion!r}",
            f"    assert {f.module}.{f.name}({f.call_args}) {f.check}",
        ]
    for status in statuses:
        lines += ["", "", f"def test_status_{status}() -> None:"]
        lines.append(f"    assert {first}.respond({status}) == {status}")
    tests = {f"tests/test_{slug(unit_id) or 'unit'}.py": "\n".join(lines) + "\n"}
    return TrivialUnit(code=code, tests=tests)
