"""Fixtures shared by every test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture
def todo_project(tmp_path: Path) -> Path:
    """A fresh copy of examples/todo to break or run."""
    dest = tmp_path / "todo"
    shutil.copytree(EXAMPLES / "todo", dest)
    return dest
