"""File tools: paths stay inside the view, writes inside the write set, Edit is exact."""

from __future__ import annotations

from devloop.agent.fs_tools import EditTool, ReadTool, WriteTool
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


def test_invalid_input_is_an_observation(make_harness: MakeHarness) -> None:
    h = make_harness(EMPTY)
    result = WriteTool().execute(h.ctx, {"path": 3})
    assert result.is_error and result.text.startswith("invalid input for Write: ")
    assert "content: Field required" in result.text
    assert WriteTool().execute(h.ctx, "not an object").is_error
