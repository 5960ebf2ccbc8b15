"""What the trivial generators share: the unit's files, slugs, declared status codes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from devloop.roles.context import status_codes


@dataclass
class TrivialUnit:
    """The files a scripted coder writes (code/) and a scripted tester writes (tests/)."""

    code: dict[str, str] = field(default_factory=dict)
    tests: dict[str, str] = field(default_factory=dict)


def slug(text: str) -> str:
    """Lowercase words joined by underscores: `reserve() refuses` -> `reserve_refuses`."""
    return "_".join(re.findall(r"[a-z0-9]+", text.lower()))


def declared_statuses(contract: dict[str, Any]) -> list[int]:
    """The HTTP statuses the tester's self-check wants a test for (as the runtime counts them)."""
    return [int(code) for code in status_codes(contract)]
