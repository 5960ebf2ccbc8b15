"""Fixtures for role tests: a fresh copy of the inventory example."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import EXAMPLES


@pytest.fixture
def inventory_project(tmp_path: Path) -> Path:
    """A fresh copy of examples/inventory to break or run."""
    dest = tmp_path / "inventory"
    shutil.copytree(EXAMPLES / "inventory", dest)
    return dest
