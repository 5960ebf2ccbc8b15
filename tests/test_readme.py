"""The README's generated tables match the code they describe."""

from __future__ import annotations

from pathlib import Path

from devloop.config import settings_table
from devloop.roles.tooltable import tool_table

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_lists_every_tool_per_role_as_the_registry_does() -> None:
    assert tool_table() in README


def test_readme_lists_every_setting_with_its_default() -> None:
    assert settings_table() in README


def test_readme_shows_the_two_set_up_commands() -> None:
    assert "make demo" in README and "make test" in README
