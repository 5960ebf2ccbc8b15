"""Role flavors: the exact tool allowlist each role's model sees and may call."""

from __future__ import annotations

from collections.abc import Iterable

from devloop.agent.tools import Tool, Toolset

COMMON_STATE_TOOLS = (
    "write_todolist",
    "update_todo_item",
    "update_runtime_state",
    "timeline_append",
    "record_memory",
)

FLAVORS: dict[str, tuple[str, ...]] = {
    "coder": (
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
        *COMMON_STATE_TOOLS,
    ),
    "tester": (
        "Read",
        "Write",
        "Bash",
        "run_tests",
        "hint_builder",
        "set_hint",
        "bug_open",
        "bug_transition",
        "bug_list",
        *COMMON_STATE_TOOLS,
    ),
    # Read-only: no file-writing tool, and its Bash runs with nothing bound writable.
    "reassess": ("Read", "Bash"),
}


def toolset(flavor: str, tools: Iterable[Tool]) -> Toolset:
    """The flavor's toolset out of every built tool."""
    if flavor not in FLAVORS:
        raise ValueError(f"unknown flavor {flavor!r}; expected one of {sorted(FLAVORS)}")
    return Toolset(flavor, FLAVORS[flavor], tools)
