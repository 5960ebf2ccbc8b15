"""The static tamper check: what it refuses in code/, and what it leaves alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devloop.runners import tamper
from devloop.scaffold.trivial_node import node_unit
from devloop.scaffold.trivial_python import python_unit

REPO = Path(__file__).resolve().parents[2]
# The issue's reproduction: nine lines that turn every failed report into a passed one.
NINE_LINES = """\
import _pytest.reports

_init = _pytest.reports.TestReport.__init__


def _green(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    if self.outcome == "failed":
        self.outcome = "passed"
_pytest.reports.TestReport.__init__ = _green
"""


def lines(source: str, path: str = "code/a.py") -> list[tuple[int, str]]:
    """(line, what) of each finding in one file."""
    return [(f.line, f.what) for f in tamper.findings({path: source})]


def test_the_issues_nine_line_patch_is_named_with_file_line_and_fix() -> None:
    found = tamper.findings({"code/todo.py": NINE_LINES})
    assert [(f.path, f.line) for f in found][:2] == [("code/todo.py", 1), ("code/todo.py", 3)]
    assert str(found[0]) == (
        "code/todo.py:1: imports _pytest.reports; code/ must not import or reach the test "
        "framework: the tests call your code"
    )
    reason = tamper.crash_reason(found)
    assert reason.startswith(tamper.REFUSED + ": code/todo.py:1: imports _pytest.reports")
    assert tamper.is_code_fault(reason) and "more)" in reason


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import sys\nsys.modules['json'] = None\n", (2, "uses sys.modules")),
        ("import sys as s\ns.modules.pop('x')\n", (2, "uses sys.modules")),
        ("from sys import modules\n", (1, "imports sys.modules")),
        ("import atexit\n", (1, "imports atexit")),
        ("import os\nos._exit(0)\n", (2, "uses os._exit")),
        ("from os import _exit as bye\nbye(0)\n", (2, "uses os._exit")),
        ("import sys\ndef f():\n    sys.exit(0)\n", (3, "uses sys.exit")),
        ("def f():\n    raise SystemExit(0)\n", (2, "raises SystemExit")),
        ("def f():\n    exit(0)\n", (2, "calls exit()")),
        ("import sys\nsys.settrace(None)\n", (2, "uses sys.settrace")),
        ("import threading\nthreading.settrace(print)\n", (2, "uses threading.settrace")),
        ("import sys\nsys.meta_path.insert(0, object())\n", (2, "uses sys.meta_path")),
        ("import builtins\n", (1, "imports builtins")),
        ("import gc\nobjs = gc.get_objects()\n", (2, "uses gc.get_objects")),
        ("import faulthandler\n", (1, "imports faulthandler")),
        ("import signal\nsignal.signal(15, print)\n", (2, "uses signal.signal")),
        ("import inspect\nf = inspect.currentframe().f_back\n", (2, "uses .f_back")),
        ("x = object.__subclasses__()\n", (1, "uses .__subclasses__")),
        ("import pluggy\n", (1, "imports pluggy")),
        ("from unittest import mock\n", (1, "imports unittest")),
        ("import importlib\nimportlib.import_module('_pytest.runner')\n",
         (2, "imports _pytest.runner")),
        ("m = __import__('pytest')\n", (1, "uses __import__")),
        ("import os\nfd = os.environ['VERDICT_FD']\n", (2, "names 'VERDICT_FD'")),
        ("import sys\nsetattr(sys, 'stdout', None)\n", (2, "calls setattr(sys, ...)")),
        ("import sys\nsys.stdout = None\n", (2, "assigns sys.stdout")),
        ("def pytest_runtest_logreport(report):\n    pass\n",
         (1, "defines the pytest hook pytest_runtest_logreport")),
    ],
)
def test_python_forms_that_reach_the_framework_or_the_process_are_found(
    source: str, expected: tuple[int, str]
) -> None:
    assert expected in lines(source)


def test_python_that_only_uses_its_arguments_sys_argv_and_the_environment_passes() -> None:
    source = (
        '"""A CLI over a store: pytest is not mentioned in code."""\n'
        "import gc, os, sys, signal, inspect, json, re\n"
        "def main(argv=sys.argv):\n"
        "    path = os.environ.get('STORE', 'x.json')\n"
        "    gc.collect()\n"
        "    sys.path.insert(0, os.path.dirname(__file__))\n"
        "    return json.dumps({'argv': argv[1:], 'path': path, 'sig': signal.SIGTERM})\n"
        "def is_fn(x):\n    return inspect.isfunction(x)\n"
        "if __name__ == '__main__':\n    sys.exit(main())\n"
    )
    assert lines(source) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("const x = require('vitest');\n", "imports the test framework"),
        ("import { expect } from '@vitest/expect';\n", "imports the test framework"),
        ("const v = await import('vite');\n", "imports the test framework"),
        ("process.exit(0);\n", "ends or reaches into the process"),
        ("process.reallyExit(0);\n", "ends or reaches into the process"),
        ("process.exitCode = 0;\n", "ends or reaches into the process"),
        ("process.on('exit', () => {});\n", "hooks the process's exit, errors or messages"),
        ("globalThis.expect = () => {};\n", "reaches the test framework's globals"),
        ("global['it'] = 1;\n", "reaches the test framework's globals"),
        ("const k = Symbol.for('$$jest-matchers-object');\n", "reaches vitest's state"),
        ("const w = __vitest_worker__;\n", "names vitest or the verdict channel"),
        ("if (process.env.VITEST) {}\n", "names vitest or the verdict channel"),
        ("expect.extend({ toBe: () => ({ pass: true }) });\n", "calls vitest's global expect"),
        ("afterEach(() => {});\n", "calls vitest's global afterEach"),
        ("Promise.prototype.then = null;\n", "patches a built-in"),
        ("delete require.cache[x];\n", "changes how modules load"),
    ],
)
def test_node_forms_that_reach_vitest_or_the_process_are_found(
    source: str, expected: str
) -> None:
    whats = [what for _, what in lines(source, "code/a.js")]
    assert any(w.startswith(expected) for w in whats), whats


def test_node_mentions_in_comments_and_strings_and_own_names_pass() -> None:
    source = (
        "// require('vitest') and process.exit(0) are only mentioned here\n"
        "/* globalThis.expect */\n"
        "const port = Number(process.env.PORT || 3000);\n"
        "const args = process.argv.slice(2);\n"
        "const msg = 'it (the id) is missing; describe (it) better';\n"
        "function test(x) { return /a/.test(x); }\n"
        "if (process.env.NODE_ENV !== 'test') console.log(port, args, msg, test('a'));\n"
        "module.exports = { test, equal: (a, b) => Object.is(a, b) };\n"
    )
    assert lines(source, "code/a.js") == []


def test_a_vue_template_is_not_read_as_code() -> None:
    source = (
        "<template><p>Describe it (briefly) and test (it)</p></template>\n"
        "<script setup>\nconst n = 1;\n</script>\n"
    )
    assert lines(source, "code/A.vue") == []
    assert lines("<script>\nprocess.exit(1)\n</script>\n", "code/A.vue")[0][0] == 2


def _scripted_code(stub: Path) -> dict[str, dict[str, str]]:
    """Per session of a stub script, the code/ files its Write and Edit turns leave."""
    out: dict[str, dict[str, str]] = {}
    for name, session in yaml.safe_load(stub.read_text())["sessions"].items():
        files: dict[str, str] = {}
        for turn in (session.get("turns") or {}).values():
            for item in turn.get("content", []):
                use: dict[str, Any] = item.get("tool_use") or {} if isinstance(item, dict) else {}
                args = use.get("input") or {}
                path = str(args.get("path", ""))
                if not path.startswith("code/"):
                    continue
                if use["name"] == "Write":
                    files[path] = args["content"]
                elif use["name"] == "Edit":
                    files[path] = files.get(path, "").replace(args["old"], args["new"])
        if files:
            out[name] = files
    return out


@pytest.mark.parametrize("example", ["todo", "inventory"])
def test_the_examples_code_passes_the_check(example: str) -> None:
    sessions = _scripted_code(REPO / "examples" / example / "stub.yaml")
    assert sessions  # the script writes code (else this test checks nothing)
    for name, files in sessions.items():
        assert tamper.findings(files) == [], name


CONTRACTS: list[dict[str, Any]] = [
    {},
    {"exports": {"module": {"code/stock.py": {"reserve(sku, qty)": "-> bool"}}}},
    {"exports": {"http": [{"method": "post", "path": "/api/x/:id",
                           "responses": {"201": {}, "400": {}}}]}},
]


@pytest.mark.parametrize("contract", CONTRACTS)
def test_the_scaffolders_stand_ins_pass_the_check(contract: dict[str, Any]) -> None:
    units = [python_unit("stock-db", contract, ["reserve() refuses"])]
    units += [node_unit("todo", kind, contract, ["it works"]) for kind in ("be", "fe", "rest")]
    for unit in units:
        assert tamper.findings(unit.code) == [], unit.code
