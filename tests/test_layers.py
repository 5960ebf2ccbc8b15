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
