"""Every tool DevLoop builds; flavors pick from these by name."""

from __future__ import annotations

from devloop.agent.bash_tool import BashTool
from devloop.agent.fs_tools import EditTool, ReadTool, WriteTool
from devloop.agent.tools import Tool
from devloop.roles.coder_tools import (
    AppendCoderLogTool,
    ContractBridgeTool,
    HashContractTool,
    SandboxCheckTool,
    VerifyTestsTool,
)
from devloop.roles.state_tools import (
    RecordMemoryTool,
    TimelineAppendTool,
    UpdateRuntimeStateTool,
    UpdateTodoItemTool,
    WriteTodolistTool,
)
from devloop.roles.syntax_tool import SyntaxCheckTool
from devloop.roles.tester_tools import (
    BugListTool,
    BugOpenTool,
    BugTransitionTool,
    HintBuilderTool,
    RunTestsTool,
    SetHintTool,
)


def all_tools() -> list[Tool]:
    """One instance of every tool."""
    return [
        ReadTool(),
        WriteTool(),
        EditTool(),
        BashTool(),
        HashContractTool(),
        ContractBridgeTool(),
        SandboxCheckTool(),
        AppendCoderLogTool(),
        VerifyTestsTool(),
        SyntaxCheckTool(),
        WriteTodolistTool(),
        UpdateTodoItemTool(),
        UpdateRuntimeStateTool(),
        TimelineAppendTool(),
        RecordMemoryTool(),
        RunTestsTool(),
        HintBuilderTool(),
        SetHintTool(),
        BugOpenTool(),
        BugTransitionTool(),
        BugListTool(),
    ]
