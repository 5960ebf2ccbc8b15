"""tool_table: the README's table of tools per role, generated from the real registry."""

from __future__ import annotations

import re

from devloop.agent.flavors import FLAVORS, toolset
from devloop.roles.registry import all_tools
from devloop.roles.tooltable import first_sentence, tool_table

CELL_BORDER = re.compile(r"(?<!\\)\|")


def rows() -> list[list[str]]:
    """The table's body as cells (unescaped borders split, the outer ones dropped)."""
    lines = tool_table().splitlines()
    return [[c.strip() for c in CELL_BORDER.split(line)[1:-1]] for line in lines[2:]]


def test_the_header_has_a_column_per_role() -> None:
    header, rule, *_ = tool_table().splitlines()
    assert header == "| tool | coder | tester | reassess | what it does |"
    assert rule == "|---|:-:|:-:|:-:|---|"


def test_every_built_tool_has_one_row_in_registry_order() -> None:
    assert [r[0] for r in rows()] == [f"`{t.name}`" for t in all_tools()]
    assert all(len(r) == 5 for r in rows())


def test_the_marks_are_what_each_role_is_shown() -> None:
    shown = {role: set(toolset(role, all_tools()).names()) for role in FLAVORS}
    for name, *marks, _ in rows():
        for role, mark in zip(FLAVORS, marks, strict=True):
            assert (mark == "x") == (name.strip("`") in shown[role]), (name, role)
    marked = {role: {r[0] for r in rows() if r[1 + i] == "x"} for i, role in enumerate(FLAVORS)}
    assert marked["reassess"] == {"`Read`", "`Bash`"}
    assert "`Edit`" not in marked["tester"] and "`run_tests`" not in marked["coder"]


def test_what_it_does_is_the_first_sentence_made_safe_for_markdown() -> None:
    does = {r[0].strip("`"): r[4] for r in rows()}
    assert does["Read"] == "Read a text file."
    assert does["sandbox_check"] == "List files you changed outside what you may write."
    assert "runs/&lt;run id&gt;/result.json" in does["run_tests"]


def test_first_sentence_keeps_abbreviations_and_joins_lines() -> None:
    text = "Mark an event, e.g. unit_coded, i.e. a\n   kind. Then more! Never this."
    assert first_sentence(text) == "Mark an event, e.g. unit_coded, i.e. a kind."
    assert first_sentence("Is it done? Yes.") == "Is it done?"
    assert first_sentence("No full stop") == "No full stop"
