"""The markdown table of every tool and the roles that may call it (in docs/architecture.md)."""

from __future__ import annotations

import re

from devloop.agent.flavors import FLAVORS
from devloop.roles.registry import all_tools

# A sentence ends at . ! or ? and a space, except after "e.g." and "i.e.".
_SENTENCE_END = re.compile(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s+")
# What markdown would take for a table border or an HTML tag.
_CELL_ESCAPES = str.maketrans({"|": "\\|", "<": "&lt;", ">": "&gt;"})


def first_sentence(text: str) -> str:
    """The first sentence of a tool description, on one line."""
    return _SENTENCE_END.split(" ".join(text.split()), maxsplit=1)[0]


def tool_table() -> str:
    """Markdown: one row per tool, an x under each role whose allowlist has it, what it does."""
    roles = list(FLAVORS)
    lines = [
        "| tool | " + " | ".join(roles) + " | what it does |",
        "|---|" + ":-:|" * len(roles) + "---|",
    ]
    for tool in all_tools():
        marks = ["x" if tool.name in FLAVORS[role] else "" for role in roles]
        does = first_sentence(tool.description).translate(_CELL_ESCAPES)
        lines.append(f"| `{tool.name}` | " + " | ".join(marks) + f" | {does} |")
    return "\n".join(lines) + "\n"
