"""Finding the indentation a key needs behind PyYAML's message: only an indentation that
makes the text parse is offered."""

from __future__ import annotations

from devloop.core.yamlindent import misindented

UNITS = "units:\n  - id: a\n    kind: lib\n{line}\n    acceptance: [x]\n"


def test_an_over_indented_key_belongs_in_line_with_the_key_above() -> None:
    found = misindented(UNITS.format(line="      depends_on: [b]"), 4)
    assert found is not None
    assert (found.key, found.found, found.expected, found.near, found.near_line) == (
        "depends_on", 6, 4, "kind", 3)
    assert "\n    depends_on: [b]\n" in found.fixed


def test_an_under_indented_item_of_a_list_lines_up_with_the_keys_of_its_item() -> None:
    found = misindented(UNITS.format(line="  depends_on: [b]"), 4)
    assert found is not None and found.expected == 4  # not 0: the spec would not parse


def test_no_indentation_is_offered_where_none_would_parse() -> None:
    assert misindented(UNITS.format(line="    title: Stock: the repo"), 4) is None
    assert misindented(UNITS.format(line="    - not a key"), 4) is None
    assert misindented("a: 1\n", 9) is None
