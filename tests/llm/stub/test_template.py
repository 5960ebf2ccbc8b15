"""Session templates: turns written once, filled in per session from the key and `units:`."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from devloop.llm.stub import Script, ScriptInvalid, Turn
from devloop.llm.stub.yamlmarks import Marks, read_yaml

SCRIPT = """\
templates:
  "coder.c.p.{unit}":
    turns:
      1:
        latency_ms: "{{wait}}"
        content:
          - text: "Writing {{unit}}: {{code}}."
          - each: code
            item: {tool_use: {name: Write, input: {path: "{{key}}", content: "{{value}}"}}}
          - tool_use:
              name: append_coder_log
              input: {changed_files: [{each: code, item: "{{key}}"}, contract.json]}
    repeat:
      - content: [{text: "again {{unit}}"}]
  "tester.{project}.{unit}":
    default: {content: [{text: "testing {{unit}} of {{project}}"}]}
sessions:
  "coder.c.p.special": {default: {content: [{text: "written out"}]}}
default: {content: [{text: "nothing scripted"}]}
units:
  money:
    wait: 5
    code: {code/money.py: "def add(a, b):\\n    return a + b\\n", code/cents.py: "X = 1\\n"}
  cart:
    wait: 0
    code: {code/cart.py: "pass\\n"}
"""


def _turn(script: Script, key: str, n: int) -> Turn:
    found = script.turn_for(key, n)
    assert found is not None
    return found


def _texts(turn: Turn) -> list[str]:
    return [b.text for b in turn.content if b.text is not None]


def test_a_template_is_filled_in_with_the_units_row_and_the_keys_parts() -> None:
    script = Script.from_yaml(SCRIPT, "stub.yaml")
    first = _turn(script, "coder.c.p.money", 1)
    assert first.latency_ms == 5  # a whole-value placeholder keeps the value's type
    assert _texts(first) == ["Writing money: code/money.py, code/cents.py."]
    calls = [b.tool_use for b in first.content if b.tool_use is not None]
    assert [(c.name, c.input.get("path")) for c in calls] == [
        ("Write", "code/money.py"), ("Write", "code/cents.py"), ("append_coder_log", None)]
    assert calls[0].input["content"] == "def add(a, b):\n    return a + b\n"
    assert calls[2].input == {"changed_files": ["code/money.py", "code/cents.py", "contract.json"]}
    assert [_texts(_turn(script, "coder.c.p.cart", n)) for n in (2, 9)] == [["again cart"]] * 2
    assert _texts(_turn(script, "tester.p.cart", 1)) == ["testing cart of p"]


def test_sessions_come_first_and_a_unit_without_a_row_is_not_matched() -> None:
    script = Script.from_yaml(SCRIPT, "stub.yaml")
    assert _texts(_turn(script, "coder.c.p.special", 1)) == ["written out"]
    assert _texts(_turn(script, "coder.c.p.stranger", 1)) == ["nothing scripted"]
    # `{unit}` is one dot-free part: a reassess session of a unit is another key.
    assert _texts(_turn(script, "coder.c.p.money.reassess.1.1", 1)) == ["nothing scripted"]


def test_a_row_missing_a_value_names_the_unit_and_its_line() -> None:
    text = SCRIPT.replace("    wait: 0\n", "")
    with pytest.raises(ScriptInvalid) as caught:
        Script.from_yaml(text, "stub.yaml")
    assert str(caught.value) == (
        'stub.yaml:24: units.cart: has no wait, which templates."coder.c.p.{unit}" uses; '
        "fix: add them to this unit's values")


def test_a_template_that_does_not_make_a_turn_names_the_templates_line_and_field() -> None:
    text = SCRIPT.replace("{name: Write, input:", "{nme: Write, input:")
    with pytest.raises(ScriptInvalid) as caught:
        Script.from_yaml(text, "stub.yaml")
    assert [str(p).split(": Field")[0].split(": Extra")[0] for p in caught.value.problems] == [
        'stub.yaml:9: templates."coder.c.p.{unit}".turns[1].content[1].item.tool_use.name',
        'stub.yaml:9: templates."coder.c.p.{unit}".turns[1].content[1].item.tool_use.nme',
    ]
    assert "(filled in for unit 'money')" in str(caught.value)


def test_a_name_neither_captured_nor_in_a_row_is_refused() -> None:
    text = 'templates:\n  "coder.{who}":\n    default: {content: [{text: "{{what}}"}]}\n'
    with pytest.raises(ScriptInvalid) as caught:
        Script.from_yaml(text, "stub.yaml")
    assert str(caught.value).startswith(
        'stub.yaml:2: templates."coder.{who}": uses {{what}}, which the pattern does not capture')


def test_a_value_that_does_not_fit_is_found_when_its_session_asks() -> None:
    # Only the table's first unit is filled in at load; the others as their sessions ask.
    script = Script.from_yaml(SCRIPT.replace("    wait: 0\n", "    wait: soon\n"), "stub.yaml")
    with pytest.raises(ScriptInvalid) as caught:
        script.turn_for("coder.c.p.cart", 1)
    assert str(caught.value).startswith(
        'stub script: templates."coder.c.p.{unit}".turns[1].latency_ms: Input should be a valid '
        "integer")
    assert "(session 'coder.c.p.cart')" in str(caught.value)


def test_line_marks_are_worked_out_only_for_a_script_with_a_problem() -> None:
    _, lines = read_yaml(SCRIPT, "stub.yaml")
    assert isinstance(lines, Marks) and not lines.computed
    Script.from_yaml(SCRIPT, "stub.yaml")  # valid: nothing asks for a line
    assert lines[("units", "cart")] == 24 and lines.computed


def test_the_same_bytes_are_parsed_once(tmp_path: Path) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(SCRIPT)
    second.write_text(SCRIPT)
    script = Script.load(first)
    assert Script.load(second) is script
    first.write_text(SCRIPT.replace("nothing scripted", "changed"))
    changed = Script.load(first)
    assert changed is not script and _texts(_turn(changed, "zzz", 1)) == ["changed"]


def test_a_parse_leaves_the_garbage_collector_as_it_found_it() -> None:
    # The collector is paused while the document is built (a big script's parse spent more
    # than half its CPU in it), and only for that long.
    was_enabled = gc.isenabled()
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            read_yaml(SCRIPT, "stub.yaml")
            with pytest.raises(ScriptInvalid):
                read_yaml("sessions: [unclosed", "stub.yaml")
            assert gc.isenabled() is enabled
    finally:
        (gc.enable if was_enabled else gc.disable)()
