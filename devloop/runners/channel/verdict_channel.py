"""DevLoop's verdict channel for pytest: one JSON line per event to the fd in VERDICT_FD.

Loaded with `-p verdict_channel` from a read-only directory; it writes as each test phase
finishes, so nothing the tests do afterwards can change what was already sent.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

_FD = int(os.environ.get("VERDICT_FD", "-1") or -1)
if _FD >= 3:
    with contextlib.suppress(OSError):  # processes the tests start do not inherit it
        os.set_inheritable(_FD, False)


def _send(record: dict[str, Any]) -> None:
    if _FD < 3:
        return
    data = (json.dumps(record, ensure_ascii=False) + "\n").encode()
    while data:
        data = data[os.write(_FD, data) :]


def pytest_collectreport(report: Any) -> None:
    if report.failed:
        _send({"e": "collect_error", "id": report.nodeid})
    elif report.skipped:
        _send({"e": "collect_skipped", "id": report.nodeid})


def pytest_collection_finish(session: Any) -> None:
    _send({"e": "collected", "n": len(session.items)})


def pytest_runtest_logreport(report: Any) -> None:
    _send({"e": "phase", "id": report.nodeid, "when": report.when, "outcome": report.outcome})


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    _send({"e": "end", "status": int(exitstatus)})
