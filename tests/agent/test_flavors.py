"""Each flavor's tool surface is exactly its allowlist; reassess can write nothing."""

from __future__ import annotations

import json
import re

import pytest

from devloop.agent.flavors import toolset
from devloop.roles.registry import all_tools
from tests.agent.harness import MakeHarness, with_role

CODER = [
    "Read",
    "Edit",
    "Write",
    "Bash",
    "hash_contract",
    "contract_bridge",
    "sandbox_check",
    "append_coder_log",
    "verify_tests",
    "syntax_check",
    "write_todolist",
    "update_todo_item",
    "update_runtime_state",
    "timeline_append",
    "record_memory",
]
TESTER = [
    "Read",
    "Write",
    "Bash",
    "run_tests",
    "hint_builder",
    "set_hint",
    "bug_open",
    "bug_transition",
    "bug_list",
    "write_todolist",
    "update_todo_item",
    "update_runtime_state",
    "timeline_append",
    "record_memory",
]


@pytest.mark.parametrize(
    ("flavor", "surface"), [("coder", CODER), ("tester", TESTER), ("reassess", ["Read", "Bash"])]
)
def test_flavor_surface_matches_allowlist_exactly(flavor: str, surface: list[str]) -> None:
    tools = toolset(flavor, all_tools())
    assert tools.names() == surface
    assert [spec.name for spec in tools.specs()] == surface
    assert "call_sub_agent" not in surface and "http" not in surface


def test_every_spec_has_words_and_an_object_schema() -> None:
    for tool in all_tools():
        spec = tool.spec()
        assert len(spec.description) > 30, spec.name
        assert spec.input_schema["type"] == "object", spec.name


def test_a_tool_outside_the_flavor_is_denied_not_run(make_harness: MakeHarness) -> None:
    h = make_harness({"default": {"content": [{"text": "x"}]}})
    tester = toolset("tester", all_tools())
    result = tester.execute(h.ctx, "Edit", {"path": "code/a.js", "old": "a", "new": "b"})
    assert result.is_error and result.text.startswith("denied: tool 'Edit'")
    assert not (h.workspace.unit_dir / "code/a.js").exists()


def test_reassess_can_write_nothing(make_harness: MakeHarness) -> None:
    h = make_harness({"default": {"content": [{"text": "x"}]}})
    tools = toolset("reassess", all_tools())
    ctx = with_role(h, role="reassess", write_patterns=())
    for name, args in [
        ("Write", {"path": "code/a.js", "content": "x"}),
        ("Edit", {"path": "spec.json", "old": "todo", "new": "x"}),
        ("append_coder_log", {"decision": {}}),
    ]:
        assert tools.execute(ctx, name, args).text.startswith(f"denied: tool '{name}'")
    bash = tools.execute(ctx, "Bash", {"command": "mkdir -p code && echo x > code/a.js"})
    assert bash.is_error and "Read-only file system" in bash.text
    assert not (h.workspace.unit_dir / "code/a.js").exists()
    assert tools.execute(ctx, "Read", {"path": "spec.json"}).is_error is False


@pytest.mark.parametrize("flavor", ["coder", "tester", "reassess"])
def test_each_tool_a_role_sees_names_only_tools_that_role_has(flavor: str) -> None:
    # The tester's Write once said "prefer Edit", a tool the tester does not have.
    tools = toolset(flavor, all_tools())
    others = {t.name for t in all_tools()} - set(tools.names())
    for spec in tools.specs():
        words = set(re.findall(r"[A-Za-z_]+", spec.description + json.dumps(spec.input_schema)))
        assert not words & others, (spec.name, words & others)


def test_the_coder_s_write_still_points_at_edit() -> None:
    [write] = [s for s in toolset("coder", all_tools()).specs() if s.name == "Write"]
    assert "prefer Edit for small changes" in write.description
