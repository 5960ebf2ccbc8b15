"""Timeline: one compact JSON line per event, read back and filtered."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from devloop.ledgers.sink import FileSink
from devloop.ledgers.timeline import Timeline


def test_append_writes_one_compact_line_stamped_in_utc(tmp_path: Path) -> None:
    path = tmp_path / "timeline.ndjson"
    # A non-UTC clock still yields a UTC stamp with a Z.
    cst = timezone(timedelta(hours=8))
    timeline = Timeline(FileSink(path), now=lambda: datetime(2026, 5, 13, 18, 31, 7, tzinfo=cst))
    event = timeline.append(
        "unit_tested", unit_id="todo-be", ref="run-1", summary="5 通过", agent="tester"
    )
    assert event.ts == "2026-05-13T10:31:07Z"
    assert path.read_text(encoding="utf-8") == (
        '{"ts":"2026-05-13T10:31:07Z","kind":"unit_tested","unit_id":"todo-be",'
        '"ref":"run-1","summary":"5 通过","agent":"tester"}\n'
    )
    assert timeline.events() == [event]


def test_unset_optional_fields_are_left_out(tmp_path: Path) -> None:
    timeline = Timeline(FileSink(tmp_path / "timeline.ndjson"))
    timeline.append("project_enqueued")
    (line,) = FileSink(tmp_path / "timeline.ndjson").lines()
    record = json.loads(line)
    assert set(record) == {"ts", "kind", "summary"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["ts"])
    assert datetime.now(UTC) - datetime.fromisoformat(record["ts"]) < timedelta(minutes=1)


def test_events_filter_by_unit_and_kind(tmp_path: Path) -> None:
    timeline = Timeline(FileSink(tmp_path / "timeline.ndjson"))
    a = timeline.append("unit_coded", unit_id="todo-be", agent="coder")
    b = timeline.append("unit_tested", unit_id="todo-be", agent="tester")
    c = timeline.append("unit_coded", unit_id="todo-fe", agent="coder")
    assert timeline.events() == [a, b, c]
    assert timeline.events(unit_id="todo-be") == [a, b]
    assert timeline.events(kind="unit_coded") == [a, c]
    assert timeline.events(unit_id="todo-fe", kind="unit_coded") == [c]
    assert timeline.events(unit_id="todo-fe", kind="unit_tested") == []


def test_foreign_fields_are_kept_and_bad_lines_skipped(tmp_path: Path) -> None:
    path = tmp_path / "timeline.ndjson"
    path.write_text(
        '{"ts":"2026-05-13T10:00:00Z","kind":"sse_sent","unit_id":"u","channel":"ops"}\n'
        '{"kind":"no timestamp"}\n'
        "{broken\n",
        encoding="utf-8",
    )
    (event,) = Timeline(FileSink(path)).events()
    assert event.model_extra == {"channel": "ops"}


def test_an_event_needs_a_kind(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a kind"):
        Timeline(FileSink(tmp_path / "timeline.ndjson")).append("")
