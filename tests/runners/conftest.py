"""Fixtures for the runner tests: a real bubblewrap sandbox and throwaway views."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.sandbox import BwrapSandbox, new_view_dir

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The units under fixtures/ are the runners' inputs, not tests of this repo.
collect_ignore = ["fixtures"]

MakeView = Callable[[str], Path]


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """The fixture units and the coders' fixes."""
    return FIXTURES


@pytest.fixture(scope="session")
def sandbox(settings: Settings) -> BwrapSandbox:
    """The real bubblewrap sandbox (no mocks: the runners run real vitest and pytest)."""
    return BwrapSandbox(settings)


@pytest.fixture
def make_view(settings: Settings) -> Iterator[MakeView]:
    """Copy a fixture unit (e.g. "node/todo-be") into a fresh view; returns the view."""
    made: list[Path] = []

    def make(unit: str) -> Path:
        view = new_view_dir(settings, prefix="runner-test-")
        made.append(view)
        shutil.copytree(FIXTURES / unit, view / "units" / Path(unit).name)
        return view

    yield make
    for view in made:
        shutil.rmtree(view, ignore_errors=True)
