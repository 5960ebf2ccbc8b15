"""FileSink: whole records, parent dirs, torn lines, and many processes appending at once."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devloop.ledgers.sink import AppendSink, DirSink, FileSink, dumps_line, read_json_lines
from devloop.safe.safedir import Dir, Refused

WORKERS = 8
LINES_PER_WORKER = 200

# Each writer waits for a "go" file so all eight append during the same few milliseconds;
# every tenth line is 20 KB, far past PIPE_BUF (4 KiB) and the 8 KiB asked for.
WRITER = r"""
import json, os, sys, time
from devloop.ledgers.sink import FileSink

go, path, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
sink = FileSink(path)
print("ready", flush=True)
deadline = time.monotonic() + 60  # bounded: a lost "go" ends the writer, not the suite
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no go file within 60 s")
    time.sleep(0.001)
for i in range(count):
    size = 20_000 if i % 10 == 0 else 50 + i
    sink.append(json.dumps({"w": worker, "i": i, "size": size, "pad": chr(97 + worker) * size}))
"""


def run_together(script: str, argv: list[list[str]], go: Path) -> None:
    """Start one python process per argv, release them at once, and require success."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(go), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args in argv
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
        go.touch()
        for proc in procs:
            _out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_file_sink_is_an_append_sink(tmp_path: Path) -> None:
    assert isinstance(FileSink(tmp_path / "x.ndjson"), AppendSink)


def test_append_creates_parent_dirs_and_terminates_the_line(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "bugs.ndjson"
    sink = FileSink(path)
    sink.append("one")
    sink.append("two\n")
    assert path.read_text() == "one\ntwo\n"
    assert sink.lines() == ["one", "two"]


def test_missing_file_has_no_lines(tmp_path: Path) -> None:
    assert FileSink(tmp_path / "nope.ndjson").lines() == []


def test_lines_skip_a_trailing_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    path.write_bytes(b'{"a":1}\n{"b":2}\n{"c":')
    assert FileSink(path).lines() == ['{"a":1}', '{"b":2}']
    path.write_bytes(b'{"c":')
    assert FileSink(path).lines() == []


def test_append_after_a_torn_line_does_not_glue_onto_it(tmp_path: Path) -> None:
    path = tmp_path / "t.ndjson"
    path.write_bytes(b'{"a":1}\n{"torn":')
    sink = FileSink(path)
    sink.append('{"b":2}')
    assert sink.lines() == ['{"a":1}', '{"torn":', '{"b":2}']


def test_a_multi_line_record_is_stored_whole(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "coder.log")
    sink.append("---\nattempt: 1\n---\n\n")
    assert sink.lines() == ["---", "attempt: 1", "---", ""]


def test_non_ascii_and_unicode_line_separators_survive(tmp_path: Path) -> None:
    sink = FileSink(tmp_path / "t.ndjson")
    record = {"title": "缺 body title → 400", "odd": "a\u2028b\u0085c"}
    sink.append(dumps_line(record))
    assert "缺 body title → 400" in (tmp_path / "t.ndjson").read_text(encoding="utf-8")
    assert list(read_json_lines(sink)) == [record]


def test_read_json_lines_skips_blank_and_malformed_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.ndjson"
    path.write_text('{"a":1}\n\nnot json\n[1,2]\n{"b":2}\n')
    with caplog.at_level(logging.WARNING):
        assert list(read_json_lines(FileSink(path))) == [{"a": 1}, {"b": 2}]
    assert "line 3 is not JSON" in caplog.text
    assert "line 4 is not a JSON object" in caplog.text


def test_eight_processes_appending_at_once_lose_and_mix_nothing(tmp_path: Path) -> None:
    path = tmp_path / "shared.ndjson"
    argv = [[str(path), str(w), str(LINES_PER_WORKER)] for w in range(WORKERS)]
    run_together(WRITER, argv, tmp_path / "go")

    raw = path.read_text()
    assert raw.endswith("\n")
    lines = FileSink(path).lines()
    assert len(lines) == WORKERS * LINES_PER_WORKER
    seen = set()
    for line in lines:
        rec = json.loads(line)  # an interleaved line would not parse
        assert rec["pad"] == chr(97 + rec["w"]) * rec["size"]
        seen.add((rec["w"], rec["i"]))
    assert seen == {(w, i) for w in range(WORKERS) for i in range(LINES_PER_WORKER)}
    assert sum(len(line) > 8192 for line in lines) == WORKERS * LINES_PER_WORKER // 10


def test_a_sink_never_appends_through_a_link_or_blocks_on_a_fifo(tmp_path: Path) -> None:
    host = tmp_path / "host.log"
    host.write_text("host\n")
    view = tmp_path / "view"
    (view / "units/u").mkdir(parents=True)
    (view / "units/u/coder.log").symlink_to(host)
    (view / "out").symlink_to(tmp_path)
    os.mkfifo(view / "pipe.log")
    with Dir.open(view) as root:
        for sink in (
            FileSink(view / "units/u/coder.log"),
            DirSink(root, "units/u/coder.log"),
            DirSink(root, "out/host.log"),
        ):
            with pytest.raises(Refused):
                sink.append("pwned")
            with pytest.raises(Refused):
                sink.lines()
        for sink in (FileSink(view / "pipe.log"), DirSink(root, "pipe.log")):
            with pytest.raises(Refused, match="is a fifo"):
                sink.append("x")  # O_NONBLOCK: refused at once, never a blocked worker
            with pytest.raises(Refused, match="is a fifo"):
                sink.lines()
        ok = DirSink(root, "units/u/real.log")
        ok.append("one")
        assert ok.lines() == ["one"]
    assert host.read_text() == "host\n"
