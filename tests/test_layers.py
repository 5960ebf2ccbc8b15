"""The library never imports the Celery adapter: imports flow cli -> workers -> devloop."""

from __future__ import annotations

import ast
from pathlib import Path

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
