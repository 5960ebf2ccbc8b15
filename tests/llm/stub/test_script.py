"""Stub scripts: lookup by session pattern and turn, and errors that name the line and fix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from devloop.llm.stub import Script, ScriptInvalid

DOCS = Path(__file__).resolve().parents[3] / "docs" / "stub-script.md"

TEXT = {"content": [{"text": "t"}]}


def _text(turn: object) -> str:
    assert turn is not None
    block = turn.content[0]  # type: ignore[attr-defined]
    return str(block.text)


def test_exact_key_wins_then_first_matching_glob_in_file_order() -> None:
    script = Script.from_dict(
        {
            "sessions": {
                "coder.*": {"turns": {1: {"content": [{"text": "glob"}]}}},
                "coder.p1.be": {"turns": {1: {"content": [{"text": "exact"}]}}},
                "*": {"turns": {1: {"content": [{"text": "any"}]}}},
            }
        }
    )
    assert _text(script.turn_for("coder.p1.be", 1)) == "exact"
    assert _text(script.turn_for("coder.p2.fe", 1)) == "glob"
    assert _text(script.turn_for("tester.p2.fe", 1)) == "any"


def test_missing_turn_falls_back_to_session_default_then_script_default() -> None:
    script = Script.from_dict(
        {
            "sessions": {
                "a.*": {"turns": {1: TEXT}, "default": {"content": [{"text": "a-default"}]}},
                "b.*": {"turns": {1: TEXT}},
            },
            "default": {"content": [{"text": "top-default"}]},
        }
    )
    assert _text(script.turn_for("a.x", 7)) == "a-default"
    assert _text(script.turn_for("b.x", 7)) == "top-default"
    assert _text(script.turn_for("zzz", 1)) == "top-default"
    assert Script.from_dict({"sessions": {"a.*": {"turns": {1: TEXT}}}}).turn_for("a.x", 2) is None


def test_repeat_serves_its_turns_round_and_round_past_the_numbered_ones() -> None:
    """A conversation kept over attempts reaches any turn number: `repeat` covers them all,
    whatever number the later attempts start at."""
    work, done = {"content": [{"text": "work"}]}, {"content": [{"text": "done"}]}
    script = Script.from_dict({"sessions": {"s": {
        "turns": {1: TEXT, 2: TEXT}, "repeat": [work, done], "default": TEXT}}})
    assert [_text(script.turn_for("s", n)) for n in (1, 2, 3, 4, 5, 6, 41, 42)] == [
        "t", "t", "work", "done", "work", "done", "work", "done"]
    alone = Script.from_dict({"sessions": {"s": {"repeat": [work, done]}}})
    assert [_text(alone.turn_for("s", n)) for n in (1, 2, 3)] == ["work", "done", "work"]


def test_stop_reason_defaults_from_the_content() -> None:
    script = Script.from_dict(
        {
            "sessions": {
                "s": {
                    "turns": {
                        1: {"content": [{"tool_use": {"name": "Read", "input": {"path": "x"}}}]},
                        2: {"content": [{"text": "done"}]},
                        3: {"content": [{"text": "cut"}], "stop_reason": "max_tokens"},
                    }
                }
            }
        }
    )
    session = script.sessions["s"]
    assert session.turns[1].resolved_stop_reason(has_tool_use=True) == "tool_use"
    assert session.turns[2].resolved_stop_reason(has_tool_use=False) == "end_turn"
    assert session.turns[3].resolved_stop_reason(has_tool_use=False) == "max_tokens"


def test_fault_shorthand_is_a_kind_served_once() -> None:
    script = Script.from_dict({"default": {**TEXT, "fault": "overloaded"}})
    assert script.default is not None and script.default.fault is not None
    assert (script.default.fault.kind, script.default.fault.times) == ("overloaded", 1)


def _problem_text(yaml_text: str) -> str:
    with pytest.raises(ScriptInvalid) as caught:
        Script.from_yaml(yaml_text, "stub.yaml")
    return str(caught.value)


def test_a_bad_fault_kind_names_its_line_and_the_allowed_values() -> None:
    text = _problem_text(
        "sessions:\n"
        "  'coder.*':\n"
        "    turns:\n"
        "      1:\n"
        "        fault: {kind: explode}\n"
        "        content: [{text: hi}]\n"
    )
    assert text.startswith('stub.yaml:5: sessions."coder.*".turns[1].fault.kind: Input should be')
    assert "'rate_limit'" in text and "fix: use one of the values listed" in text


def test_a_misspelt_key_lists_what_is_allowed_there() -> None:
    text = _problem_text("sessions:\n  s:\n    turnz: {}\n")
    assert text == (
        "stub.yaml:3: sessions.s.turnz: Extra inputs are not permitted; "
        "fix: remove `turnz` or fix its spelling; allowed here: turns, repeat, default"
    )


def test_a_block_with_both_text_and_tool_use_is_rejected_on_its_line() -> None:
    text = _problem_text(
        "default:\n  content:\n    - text: a\n    - text: b\n      tool_use: {name: Read}\n"
    )
    assert text.startswith("stub.yaml:4: default.content[1]: a content block needs exactly one")


def test_a_turn_number_must_be_an_integer_from_one() -> None:
    text = _problem_text("sessions:\n  s:\n    turns:\n      first: {content: []}\n")
    assert text.startswith("stub.yaml:4: sessions.s.turns.first")
    assert "number turns 1, 2, 3" in text
    assert "turns[0]" in _problem_text("sessions:\n  s:\n    turns:\n      0: {content: []}\n")


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ScriptInvalid) as caught:
        Script.from_yaml("default:\n  latency_ms: -1\n  stop_reason: nope\n", "stub.yaml")
    lines = [p.file for p in caught.value.problems]
    assert lines == ["stub.yaml:2", "stub.yaml:3"]


def test_yaml_syntax_errors_and_duplicate_keys_name_the_line() -> None:
    assert _problem_text("default:\n  content: [\n").startswith("stub.yaml:3: (yaml)")
    duplicate = _problem_text("sessions:\n  s: {}\n  s: {}\n")
    assert duplicate.startswith("stub.yaml:3: sessions.s: duplicate key")


def test_an_over_indented_key_names_the_indentation_it_needs() -> None:
    text = "sessions:\n  s:\n    latency_ms: 5\n      turns: {}\n"
    assert _problem_text(text) == (
        "stub.yaml:4: turns: indented 6 spaces, deeper than `latency_ms` on line 3 (4 spaces); "
        "fix: indent `turns` 4 spaces, in line with `latency_ms` (or, if that line belongs to "
        "the value above, quote the value)")


def test_a_script_must_be_a_mapping() -> None:
    assert "a script must be a mapping" in _problem_text("- 1\n- 2\n")
    assert Script.from_yaml("", "empty.yaml") == Script()


def test_dict_scripts_name_the_field_without_a_line() -> None:
    with pytest.raises(ScriptInvalid, match=r"^<dict>: default.latency_ms: Input should be"):
        Script.from_dict({"default": {"latency_ms": "soon"}})


def test_load_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("default:\n  stop_sequence: END\n")
    expected = f"{path}:2: default.stop_sequence: `stop_sequence` is only meaningful with"
    with pytest.raises(ScriptInvalid, match=re.escape(expected)):
        Script.load(path)


def test_the_yaml_examples_in_the_docs_are_valid_scripts() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert len(blocks) >= 3
    for block in blocks:
        assert isinstance(yaml.safe_load(block), dict)
        Script.from_yaml(block, "docs")
