"""The tester's export excerpt never cuts a signature (issue 29, item 3).

A played run showed `createApp(service = createTodoService()`: the parameters were read up
to the first `)`, and a long line was cut at a fixed width wherever it fell.
"""

from __future__ import annotations

from pathlib import Path

from devloop.runners.excerpt import MAX_LINE, code_exports, js_exports
from devloop.safe.safedir import Dir

SERVER = """\
const express = require('express');
const { createTodoService } = require('./service');

function createApp(service = createTodoService(), { limit = Math.max(1, 2) } = {}) {
  const app = express();
  return app;
}

const makeRouter = (app, opts = defaults()) => app;

module.exports = { createApp, makeRouter };
"""


def test_a_default_value_with_parentheses_keeps_the_whole_signature() -> None:
    assert js_exports("code/server.js", SERVER) == [
        "createApp(service = createTodoService(), { limit = Math.max(1, 2) } = {})",
        "makeRouter(app, opts = defaults())",
    ]


def test_a_long_line_lists_whole_signatures_and_counts_the_rest(tmp_path: Path) -> None:
    code = tmp_path / "units/u/code"
    code.mkdir(parents=True)
    params = ", ".join(f"argument_number_{i}" for i in range(4))
    (code / "wide.py").write_text(
        "".join(f"def function_{n}({params}):\n    pass\n\n\n" for n in range(8))
    )
    with Dir.open(tmp_path) as view:
        [line] = code_exports(view, "units/u")
    assert len(line) <= MAX_LINE + 40
    shown, _, more = line.removeprefix("code/wide.py: ").partition(", ... and ")
    assert more.endswith("more (read the file)")
    signatures = shown.split("), ")
    assert all(s.rstrip(")").endswith("argument_number_3") for s in signatures)
    assert len(signatures) + int(more.split()[0]) == 8
