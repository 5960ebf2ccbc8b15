"""One session's dependencies on the host: their passed code as packages, bound at
/upstream in its test runs (never in its view, so `Read` and Bash cannot open it)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from devloop.core import dag
from devloop.core.artifacts import name_refusal
from devloop.core.config import Settings
from devloop.core.models import UnitsFile
from devloop.safe.safedir import Dir
from devloop.sandbox.viewdir import make_view, remove_view
from devloop.store import RedisStore
from devloop.upstream.imports import Scope, import_problems
from devloop.upstream.layout import UnitCode, tree_for

ROOT = PurePosixPath("/upstream")  # where the tree is bound in a run's sandbox
PYTHON_PATH = str(ROOT / "python")
NODE_PATH = str(ROOT / "node_modules")


@dataclass
class Upstream:
    """A unit's dependencies as its runs see them: the scope its imports are checked
    against, and the host tree bound at /upstream (None: nothing to bind)."""

    scope: Scope
    root: Path | None = None
    units: tuple[str, ...] = field(default=())

    def binds(self) -> list[tuple[Path, str]]:
        """The read-only bind of the tree, for a run's sandbox."""
        return [(self.root, str(ROOT))] if self.root is not None else []

    def problems(self, files: Mapping[str, str]) -> list[str]:
        """What `files` (unit-relative path -> text) import that is not there."""
        return import_problems(self.scope, files)

    def close(self) -> None:
        """Remove the tree from the host."""
        if self.root is not None:
            root, self.root = self.root, None
            remove_view(root)


def no_upstream(unit: str, stack: str) -> Upstream:
    """The upstream of a run with nothing to import (tests, tools that run one unit)."""
    return Upstream(Scope(unit=unit, stack=stack, present={}))


def unit_code(unit: str, files: Mapping[str, bytes], stack: str, kind: str) -> UnitCode:
    """A unit's code/** (code/-relative) and parsed contract.json from its passed files."""
    contract: Any = None
    raw = files.get("contract.json")
    if raw:
        try:
            contract = json.loads(raw)
        except ValueError:
            contract = None
    # Never an artifact (a .pyc, a .git): dependents import the source that was reviewed.
    code = {p.removeprefix("code/"): b for p, b in files.items()
            if p.startswith("code/") and name_refusal(p) is None}
    return UnitCode(unit, code, contract if isinstance(contract, dict) else None, stack, kind)


def scope_for(
    units: UnitsFile,
    unit: str,
    stack: str,
    passed: Mapping[str, Mapping[str, bytes]],
    not_passed: Mapping[str, str],
    contracts: Mapping[str, Mapping[str, Any] | None],
) -> Scope:
    """The import scope of `unit`: which dependencies' code is there and why not the rest
    (`not_passed`: dependency -> why it has not, in words)."""
    graph = {u.id: list(u.depends_on) for u in units.units}
    entries = {u.id: u for u in units.units}
    present, absent = {}, {}
    for dep in dag.upstream(graph, unit):
        other = entries[dep].stack or units.stack
        if other != stack:  # another stack's code cannot be imported, only called over http
            absent[dep] = f"it is a {other} unit and this one is {stack}"
        elif dep in passed:
            present[dep] = unit_code(dep, passed[dep], stack, entries[dep].kind)
        else:
            absent[dep] = not_passed.get(dep, "it has not passed")
    entry = units.unit(unit)
    return Scope(
        unit=unit,
        stack=stack,
        present=present,
        absent=absent,
        project={u.id: contracts.get(u.id) for u in units.units},
        depends_on=tuple(entry.depends_on) if entry else (),
    )


def mount_upstream(
    store: RedisStore, settings: Settings, pid: str, units: UnitsFile, unit: str, stack: str
) -> Upstream:
    """Lay out the passed code of every unit `unit` depends on (directly or not) in a
    fresh host dir the sandbox uid can read, and the scope its imports are checked in."""
    graph = {u.id: list(u.depends_on) for u in units.units}
    deps = dag.upstream(graph, unit)
    passed = store.passed_code(pid, deps) if deps else {}
    states = store.get_states(pid, deps) if deps else {}
    why = {u: f"it has not passed (it is {s.status})" for u, s in states.items()}
    scope = scope_for(units, unit, stack, passed, why, store.sdd_contracts(pid))
    return lay_out(settings, scope)


def lay_out(settings: Settings, scope: Scope) -> Upstream:
    """The tree of the scope's present units in a fresh host dir the sandbox uid can read
    (none when nothing is present)."""
    if not scope.present:
        return Upstream(scope)
    root = make_view(settings, prefix=f"upstream-{scope.unit}-")
    try:
        with Dir.open(root) as tree:
            for rel, data in tree_for(scope.stack, scope.present).files.items():
                tree.write_atomic(rel, data, 0o644)
    except BaseException:
        remove_view(root)
        raise
    return Upstream(scope, root, tuple(sorted(scope.present)))
