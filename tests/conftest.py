"""Fixtures shared by every test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from devloop.core.config import Settings, load_settings
from devloop.project.toolchain import node_toolchain, python_toolchain
from devloop.safe.cachedir import cache_root

pytest_plugins = ["tests.redis_fixture", "tests.leftovers", "tests.spread"]

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture
def todo_project(tmp_path: Path) -> Path:
    """A fresh copy of examples/todo to break or run."""
    dest = tmp_path / "todo"
    shutil.copytree(EXAMPLES / "todo", dest)
    return dest


@pytest.fixture(scope="session")
def settings() -> Settings:
    """Settings from the environment (DEVLOOP_CACHE_DIR and friends)."""
    return load_settings()


@pytest.fixture(scope="session")
def node_toolchain_dir(settings: Settings) -> Path:
    """The node toolchain, installed once per machine (about a minute the first time)."""
    return node_toolchain(cache_root(settings))


@pytest.fixture(scope="session")
def python_toolchain_dir(settings: Settings) -> Path:
    """The python stack's test venv, installed once per machine."""
    return python_toolchain(cache_root(settings))
