"""File tools: paths stay inside the view, writes inside the write set, Edit is exact."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from devloop.agent.fs_tools import EditTool, ReadTool, WriteTool
from devloop.agent.tools import ToolResult
from devloop.roles.coder_tools import AppendCoderLogTool
from tests.agent.harness import MakeHarness

EMPTY = {"default": {"content": [{"text": "x"}]}}


def test_read_numbers_lines_and_pages(make_harness: MakeHarness) -> None:
    h = make_harness(EMPTY)
    (h.workspace.unit_dir / "code").mkdir(exist_ok=True)
    (h.workspace.unit_dir / "code/a.js").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = ReadTool().execute(h.ctx, {"path": "code/a.js", "offset": 3, "limit": 2})
    assert result.text.splitlines() == [
        "    3  line 3",
        "    4  line 4",
        "[6 more lines: read again with offset=5]",
    ]
    assert result.untrusted


def test_paths_outside_the_view_are_error_observations(make_harness: MakeHarness) -> None:
    h = make_harness(EMPTY)
    read = ReadTool()
    assert read.execute(h.ctx, {"path": "/etc/passwd"}).text.startswith("/etc/passwd: absolute")
    assert read.execute(h.ctx, {"path": "../../../etc/passwd"}).text.endswith("outside the view")
    assert read.execute(h.ctx, {"path": "../todo-fe/spec.json"}).text.endswith("no such file")
    upstream = read.execute(h.ctx, {"path": "../../units.json"})
    assert not upstream.is_error and "todo-fe" in upstream.text


def test_write_refuses_outside_the_write_set(make_harness: MakeHarness) -> None:
    h = make_harness(EMPTY)
    write = WriteTool()
    denied = write.execute(h.ctx, {"path": "tests/a.spec.js", "content": "x"})
    assert denied.is_error and "outside what the coder may write" in denied.text
    assert not (h.workspace.unit_dir / "tests").exists()
    escaped = write.execute(h.ctx, {"path": "../todo-fe/code/x.js", "content": "x"})
    assert escaped.is_error
    ok = write.execute(h.ctx, {"path": "code/nested/b.js", "content": "x"})
    assert ok.text == "created code/nested/b.js (1 bytes)" and ok.changed_files == (
        "code/nested/b.js",
    )


def test_edit_needs_one_exact_match(make_harness: MakeHarness) -> None:
    h = make_harness(EMPTY)
    WriteTool().execute(h.ctx, {"path": "code/a.js", "content": "a = 1;\na = 1;\nb = 2;\n"})
    edit = EditTool()
    none = edit.execute(h.ctx, {"path": "code/a.js", "old": "c = 3;", "new": "x"})
    assert none.is_error and "not found" in none.text
    many = edit.execute(h.ctx, {"path": "code/a.js", "old": "a = 1;", "new": "x"})
    assert many.is_error and "occurs 2 times" in many.text
    one = edit.execute(h.ctx, {"path": "code/a.js", "old": "b = 2;", "new": "b = 3;"})
    assert one.text == "edited code/a.js"
    assert (h.workspace.unit_dir / "code/a.js").read_text() == "a = 1;\na = 1;\nb = 3;\n"


def test_write_and_edit_refuse_artifacts_and_bidi_controls_at_once(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(EMPTY)
    write, edit = WriteTool(), EditTool()
    git = write.execute(h.ctx, {"path": "code/.git/config", "content": "[core]\n"})
    assert git.is_error and git.text.startswith(
        "denied: code/.git/config is version-control metadata (.git), not source")
    pyc = write.execute(h.ctx, {"path": "code/__pycache__/m.cpython-311.pyc", "content": "x"})
    assert pyc.is_error and "a bytecode cache (__pycache__)" in pyc.text
    trojan = write.execute(h.ctx, {"path": "code/a.py", "content": 'x = "\u202e"\n'})
    assert trojan.is_error and "bidi control U+202E on line 1" in trojan.text
    write.execute(h.ctx, {"path": "code/a.py", "content": "x = 1\n"})
    edited = edit.execute(h.ctx, {"path": "code/a.py", "old": "1", "new": "\u2067"})
    assert edited.is_error and "U+2067" in edited.text
    assert (h.workspace.unit_dir / "code/a.py").read_text() == "x = 1\n"
    assert not (h.workspace.unit_dir / "code/.git").exists()


def test_invalid_input_is_an_observation(make_harness: MakeHarness) -> None:
    h = make_harness(EMPTY)
    result = WriteTool().execute(h.ctx, {"path": 3})
    assert result.is_error and result.text.startswith("invalid input for Write: ")
    assert "content: Field required" in result.text
    assert WriteTool().execute(h.ctx, "not an object").is_error


# --- what a session plants in its view is never followed by the host -------------------


def finishes(call: Callable[[], ToolResult]) -> ToolResult:
    """call() in a thread; fails if it blocks (a fifo opened for blocking I/O would)."""
    results: list[ToolResult] = []
    thread = threading.Thread(target=lambda: results.append(call()), daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the tool call blocked"
    return results[0]


def test_a_link_planted_at_the_old_temporary_name_leads_nowhere(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = make_harness(EMPTY)
    host_file = tmp_path / "written-by-the-worker"
    code = h.workspace.unit_dir / "code"
    code.mkdir(exist_ok=True)
    (code / ".x.js.tmp").symlink_to(host_file)  # as `ln -s` in Bash would
    result = WriteTool().execute(h.ctx, {"path": "code/x.js", "content": "pwned"})
    assert not result.is_error, result.text
    assert not host_file.exists()
    assert (code / "x.js").read_text() == "pwned" and (code / ".x.js.tmp").is_symlink()


def test_write_and_edit_through_a_planted_link_are_errors_that_write_nothing(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = make_harness(EMPTY)
    host = tmp_path / "host"
    host.mkdir()
    (host / "config").write_text("host config\n")
    code = h.workspace.unit_dir / "code"
    code.mkdir(exist_ok=True)
    (code / "out").symlink_to(host)  # code/out -> a host dir
    (code / "cfg.js").symlink_to(host / "config")
    (code / "new.js").symlink_to(host / "new-file")
    write, edit = WriteTool(), EditTool()
    cases = [
        (write, {"path": "code/out/a.js", "content": "pwned"}, "passes through a symlink"),
        (write, {"path": "code/out/x/y.js", "content": "pwned"}, "passes through a symlink"),
        (write, {"path": "code/cfg.js", "content": "pwned"}, "is a symlink"),
        (write, {"path": "code/new.js", "content": "pwned"}, "is a symlink"),
        (edit, {"path": "code/cfg.js", "old": "host", "new": "pwned"}, "is a symlink"),
    ]
    for tool, args, reason in cases:
        result = tool.execute(h.ctx, args)
        assert result.is_error and reason in result.text, result.text
    assert sorted(p.name for p in host.iterdir()) == ["config"]
    assert (host / "config").read_text() == "host config\n"


def test_write_onto_a_fifo_is_an_error_at_once(make_harness: MakeHarness) -> None:
    h = make_harness(EMPTY)
    code = h.workspace.unit_dir / "code"
    code.mkdir(exist_ok=True)
    os.mkfifo(code / "pipe.js")
    result = finishes(lambda: WriteTool().execute(h.ctx, {"path": "code/pipe.js", "content": "x"}))
    assert result.is_error and "is a fifo" in result.text
    edited = finishes(
        lambda: EditTool().execute(h.ctx, {"path": "code/pipe.js", "old": "a", "new": "b"})
    )
    assert edited.is_error and "is a fifo" in edited.text


def test_read_of_a_fifo_or_a_link_is_an_error_at_once(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = make_harness(EMPTY)
    (tmp_path / "secret").write_text("host secret")
    code = h.workspace.unit_dir / "code"
    code.mkdir(exist_ok=True)
    os.mkfifo(code / "pipe")
    (code / "leak").symlink_to(tmp_path / "secret")
    read = ReadTool()
    fifo = finishes(lambda: read.execute(h.ctx, {"path": "code/pipe"}))
    assert fifo.is_error and fifo.text == "code/pipe: is a fifo, not a regular file"
    leak = read.execute(h.ctx, {"path": "code/leak"})
    assert leak.is_error and "host secret" not in leak.text
    listing = read.execute(h.ctx, {"path": "code"})
    assert listing.text == "code is a directory: leak pipe"


def test_append_coder_log_through_a_planted_link_is_an_error_that_writes_nothing(
    make_harness: MakeHarness, tmp_path: Path
) -> None:
    h = make_harness(EMPTY)
    host = tmp_path / "host.log"
    host.write_text("host\n")
    log = h.workspace.unit_dir / "coder.log"
    log.unlink(missing_ok=True)
    log.symlink_to(host)
    decision = {"this_fix": "x", "rationale": "y", "changed_files": ["code/a.js"]}
    result = AppendCoderLogTool().execute(h.ctx, {"decision": decision})
    assert result.is_error and result.text.startswith("coder.log: is a symlink")
    assert host.read_text() == "host\n"
