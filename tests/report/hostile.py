"""A project folder whose every model-written text tries to inject markup into the report."""

from __future__ import annotations

from pathlib import Path

from devloop.core.models import Failure
from tests.report.folders import Folder

# Markup in a unit id is refused by the id rule before any report (tests/test_ids.py).
EVIL_UNIT = "evil-unit"
PAYLOADS = (
    '<script>alert("fix")</script>',
    "<img src=x onerror=alert(2)>",
    "<iframe src=https://evil.example></iframe>",
    '<a href="http://evil.example">click</a>',
    "<style>body{display:none}</style>",
)


def hostile_project(root: Path) -> Path:
    """Two units; reflections, hints, test names, bugs and events carry the payloads."""
    folder = Folder(root).units({"ok": [], EVIL_UNIT: ["ok"]})
    folder.decision(EVIL_UNIT, 1, PAYLOADS[0], rationale=PAYLOADS[4])
    failure = Failure(
        test=PAYLOADS[2], expected=PAYLOADS[1], got=None, hint=PAYLOADS[1], stack=PAYLOADS[3]
    )
    folder.run(EVIL_UNIT, 1, False, [failure])
    folder.step(EVIL_UNIT, "coder", 1, 0.0, 2.0, worker=f"{PAYLOADS[1]}:7")
    folder.step(EVIL_UNIT, "tester", 1, 2.0, 4.0, output={"ok": False})
    folder.loop(EVIL_UNIT, "loop_block", 1, PAYLOADS[3])
    folder.bugs().open(EVIL_UNIT, "run-1-1", PAYLOADS[2], title=PAYLOADS[4], detail=PAYLOADS[0])
    return root
