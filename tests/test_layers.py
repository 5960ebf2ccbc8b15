"""The library never imports the Celery adapter: imports flow cli -> workers -> devloop."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

LIBRARY = Path(__file__).resolve().parent.parent / "devloop"


def test_no_module_under_devloop_imports_celery_or_workers() -> None:
    offenders = []
    for path in LIBRARY.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [
                f"{path.relative_to(LIBRARY.parent)}: {n}"
                for n in names
                if n.split(".")[0] in {"celery", "workers", "kombu"}
            ]
    assert offenders == []


PURE_CORE = ("devloop.loop", "devloop.dag", "devloop.contracts", "devloop.sdd")


@pytest.mark.parametrize("module", PURE_CORE)
def test_a_pure_decision_module_loads_no_store_and_no_redis_client(module: str) -> None:
    """The loop, the DAG, contract hashes and the SDD are decisions over models: importing
    one loads neither the store nor a Redis client (a fresh interpreter tells)."""
    loaded = subprocess.run(
        [sys.executable, "-c", f"import sys, {module}; print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()
    ours = [m for m in loaded if m.split(".")[0] in {"devloop", "redis"}]
    assert not [m for m in ours if m == "redis" or m.startswith(("redis.", "devloop.store"))], ours
    assert len([m for m in ours if m.startswith("devloop")]) <= 8, ours


def _module_imports(root: Path) -> dict[str, set[str]]:
    """Each module of devloop/ and workers/ -> the modules of ours it imports at its top
    level (what runs at import time: function-level imports are deferred by design)."""
    paths = {}
    for package in ("devloop", "workers"):
        for path in (root / package).rglob("*.py"):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            paths[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        edges: set[str] = set()
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                edges.update(s for s in subs if s in paths)
                if node.module in paths and not all(s in paths for s in subs):
                    edges.add(node.module)
        graph[name] = edges - {name}
    return graph


def test_no_import_circle_among_our_modules() -> None:
    """Every module can be read from its imports down: no two modules import each other,
    directly or round a longer circle (a circle is a layer drawn wrong)."""
    graph = _module_imports(LIBRARY.parent)
    circles, done = [], set()
    for start in graph:  # a depth-first walk from every module; a grey node is a circle
        stack, grey = [(start, iter(sorted(graph[start])))], {start}
        while stack:
            node, rest = stack[-1]
            step = next(rest, None)
            if step is None:
                stack.pop()
                grey.discard(node)
                done.add(node)
            elif step in grey:
                circles.append([n for n, _ in stack] + [step])
            elif step not in done:
                grey.add(step)
                stack.append((step, iter(sorted(graph[step]))))
    assert circles == []


def test_the_roles_never_import_the_fleet() -> None:
    """A role session runs inside a step and is driven by the fleet, never the other way:
    no module under devloop/roles/ imports devloop.fleet, at any level of the module."""
    offenders = []
    for path in (LIBRARY / "roles").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            offenders += [f"{path.relative_to(LIBRARY.parent)}: {n}" for n in names
                          if n == "devloop.fleet" or n.startswith("devloop.fleet.")]
    assert offenders == []
