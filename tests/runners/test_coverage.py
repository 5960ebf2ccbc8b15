"""Coverage of code/ by a unit's tests: real pytest and vitest runs, and the parsing alone."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from devloop.core.config import Settings
from devloop.core.models import CodeCoverage, FileCoverage, RunResult
from devloop.runners import PytestRunner, VitestRunner
from devloop.runners.coverage import (
    describe,
    js_function_name,
    parse_node,
    parse_python,
    python_exports,
    unexecuted_problems,
)
from devloop.sandbox import BwrapSandbox, new_view_dir

RUN = "run-1"
PY_CODE = '''def sign(x):
    if x > 0:
        return 1
    return -1


def total(items):
    return sum(items)


def _helper():
    return 0
'''
JS_CODE = """function sign(x) {
  if (x > 0) {
    return 1;
  }
  return -1;
}
function total(items) {
  return items.reduce((a, b) => a + b, 0);
}
const double = (x) => x * 2;
class Cart {
  constructor() { this.items = []; }
  add(x) { this.items.push(x); }
  size() { return this.items.length; }
  _secret() { return 0; }
}
module.exports = { sign, total, double, Cart };
"""


def unit(settings: Settings, name: str, files: dict[str, str]) -> Path:
    """A view holding units/{name} with these files; returns the view."""
    view = new_view_dir(settings, prefix="coverage-test-")
    for rel, text in files.items():
        path = view / "units" / name / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return view


@pytest.fixture
def views(settings: Settings) -> Any:
    """Make views; they are removed after the test."""
    made: list[Path] = []

    def make(name: str, files: dict[str, str]) -> Path:
        made.append(unit(settings, name, files))
        return made[-1]

    yield make
    for view in made:
        shutil.rmtree(view, ignore_errors=True)


def written(view: Path, name: str) -> RunResult:
    """The result.json the runner wrote."""
    raw = (view / f"units/{name}/runs/{RUN}/result.json").read_text()
    return RunResult.model_validate_json(raw)


# --- python, real pytest in the sandbox -----------------------------------------------------


@pytest.fixture(scope="module")
def pytest_runner(sandbox: BwrapSandbox, python_toolchain_dir: Path) -> PytestRunner:
    return PytestRunner(sandbox, python_toolchain_dir)


def run_py(runner: PytestRunner, view: Path) -> RunResult:
    return runner.run(
        view=view, unit_id="cart", run_id=RUN, attempt=1, retry_budget_left=1, timeout_s=60
    ).result


def test_python_lines_branches_and_the_uncalled_export(
    pytest_runner: PytestRunner, views: Any
) -> None:
    tests = "import cart\n\n\ndef test_sign():\n    assert cart.sign(2) == 1\n"
    view = views("cart", {"code/cart.py": PY_CODE, "tests/test_cart.py": tests})
    result = run_py(pytest_runner, view)
    assert result.ok and result.coverage is not None
    # 8 statements, 5 ran (the defs, the if, `return 1`); the if's false branch never taken.
    assert (result.coverage.lines, result.coverage.branches) == (0.625, 0.5)
    assert result.coverage.files == {"code/cart.py": FileCoverage(lines=0.625, branches=0.5)}
    assert result.coverage.unexecuted == ["code/cart.py: total"]  # _helper is not exported
    assert written(view, "cart") == result
    # The self-check item, from the runtime's record of the run.
    assert unexecuted_problems(result.to_json_dict()) == [
        "no test executes code/cart.py: total(); write a test that calls it"
    ]
    # code/ is as the coder wrote it; the data file stayed on the sandbox's /tmp.
    unit_dir = view / "units/cart"
    assert sorted(p.name for p in (unit_dir / "code").iterdir()) == ["cart.py"]
    assert not list(unit_dir.rglob(".coverage*")) and not list(unit_dir.rglob("__pycache__"))


def test_a_broken_coverage_report_leaves_a_green_run_green(
    pytest_runner: PytestRunner, views: Any
) -> None:
    # The tests plant a directory where coverage json would write: no report, same verdict.
    tests = (
        "import os\nimport cart\n\n\ndef test_sign():\n"
        "    os.makedirs('runs/run-1/coverage.json/x', exist_ok=True)\n"
        "    assert cart.sign(2) == 1\n"
    )
    view = views("cart", {"code/cart.py": PY_CODE, "tests/test_cart.py": tests})
    result = run_py(pytest_runner, view)
    assert (result.ok, result.crashed, result.coverage) == (True, False, None)
    run_dir = view / f"units/cart/runs/{RUN}"
    assert "coverage" not in json.loads((run_dir / "result.json").read_text())
    # The report is written by the run's own process (the coverage_json plugin), whose
    # failure is silent: the run's output holds nothing of it.
    output = run_output(run_dir)
    assert "coverage" not in output.lower() and "Traceback" not in output


def test_the_report_says_nothing_in_the_runs_output(
    pytest_runner: PytestRunner, views: Any
) -> None:
    # Tests that import nothing of code/: coverage.py would warn that it collected no data,
    # and it says where it wrote the report; neither is the tests' output.
    tests = "def test_arithmetic():\n    assert 1 + 1 == 2\n"
    view = views("cart", {"code/cart.py": PY_CODE, "tests/test_cart.py": tests})
    result = run_py(pytest_runner, view)
    assert result.ok and result.coverage is not None and result.coverage.lines == 0.0
    output = run_output(view / f"units/cart/runs/{RUN}")
    assert "Wrote JSON report" not in output and "CoverageWarning" not in output, output


def run_output(run_dir: Path) -> str:
    """What the run printed: its stdout.txt and stderr.txt."""
    return (run_dir / "stdout.txt").read_text() + (run_dir / "stderr.txt").read_text()


# --- node, real vitest in the sandbox -------------------------------------------------------


@pytest.fixture(scope="module")
def vitest_runner(sandbox: BwrapSandbox, node_toolchain_dir: Path) -> VitestRunner:
    return VitestRunner(sandbox, node_toolchain_dir / "node_modules")


def test_node_lines_branches_and_the_uncalled_exports(
    vitest_runner: VitestRunner, views: Any
) -> None:
    tests = (
        "const { sign, Cart } = require('../code/cart');\n"
        "it('sign', () => { expect(sign(2)).toBe(1); new Cart().add(1); });\n"
    )
    view = views("cart", {"code/cart.js": JS_CODE, "tests/cart.spec.js": tests})
    result = vitest_runner.run(
        view=view, unit_id="cart", run_id=RUN, attempt=1, retry_budget_left=1, timeout_s=60
    ).result
    assert result.ok and result.coverage is not None
    # Lines with statements: 2 3 5 8 10 12 13 14 15 17; run: 2 3 10 12 13 17. Branches: the
    # if's true one only.
    assert (result.coverage.lines, result.coverage.branches) == (0.6, 0.5)
    assert list(result.coverage.files) == ["code/cart.js"]
    assert result.coverage.unexecuted == [
        "code/cart.js: total", "code/cart.js: double", "code/cart.js: Cart.size"
    ]
    assert written(view, "cart") == result


# --- parsing alone --------------------------------------------------------------------------


def py_summary(covered: int, statements: int, branches: int = 0, taken: int = 0) -> dict[str, int]:
    return {
        "covered_lines": covered, "num_statements": statements,
        "num_branches": branches, "covered_branches": taken,
    }


def source_of(files: dict[str, str]) -> Any:
    return lambda rel: files.get(rel)


def test_coverage_py_json_is_read_into_ratios_and_uncalled_exports() -> None:
    data = {
        "totals": py_summary(5, 8, 2, 1),
        "files": {
            "code/cart.py": {
                "summary": py_summary(5, 8, 2, 1),
                "functions": {
                    "sign": {"summary": py_summary(2, 3)},
                    "total": {"summary": py_summary(0, 1)},
                    "_helper": {"summary": py_summary(0, 1)},
                },
            },
            "../elsewhere.py": {"summary": py_summary(1, 1)},
        },
    }
    cov = parse_python(data, source_of({"code/cart.py": PY_CODE}))
    assert cov == CodeCoverage(
        lines=0.625, branches=0.5,
        files={"code/cart.py": FileCoverage(lines=0.625, branches=0.5)},
        unexecuted=["code/cart.py: total"],
    )
    assert describe(cov) == "lines 62%, branches 50%; no test executes code/cart.py: total()"
    assert describe(cov.model_dump()) == describe(cov)


@pytest.mark.parametrize(
    "data",
    [
        None, [], {"files": []}, {"files": {}},
        {"files": {}, "totals": py_summary(9, 8)},  # more covered than there are
        {"files": {}, "totals": {"covered_lines": "5", "num_statements": 8}},
        {"files": {}, "totals": {"covered_lines": True, "num_statements": 8}},
        {"files": {}, "totals": py_summary(-1, 8)},
    ],
)
def test_a_malformed_coverage_py_report_is_no_coverage(data: Any) -> None:
    assert parse_python(data, source_of({})) is None


def test_a_malformed_file_entry_is_left_out_not_the_whole_report() -> None:
    data = {"totals": py_summary(0, 0), "files": {"code/a.py": "x", "code/b.py": {"summary": 1}}}
    assert parse_python(data, source_of({})) == CodeCoverage(lines=None, branches=None)


def test_python_exports_are_public_functions_methods_and_constructors() -> None:
    text = (
        "class Cart:\n    def __init__(self): pass\n    def add(self): pass\n"
        "    def _x(self): pass\n\nclass _Hidden:\n    def add(self): pass\n\n"
        "async def fetch(): pass\n\ndef outer():\n    def inner(): pass\n"
    )
    assert python_exports(text) == [
        ("Cart", "Cart.__init__"), ("Cart.add", "Cart.add"), ("fetch", "fetch"),
        ("outer", "outer"),
    ]
    assert python_exports("def (:") == []


def fn(name: str, line: int, column: int) -> dict[str, Any]:
    return {"name": name, "decl": {"start": {"line": line, "column": column}}}


def test_js_function_names_come_from_the_map_or_the_source() -> None:
    lines = JS_CODE.splitlines()
    assert js_function_name(fn("sign", 1, 9), lines) == "sign"
    assert js_function_name(fn("(anonymous_2)", 10, 15), lines) == "double"
    assert js_function_name(fn("(anonymous_3)", 12, 2), lines) == "Cart"
    assert js_function_name(fn("(anonymous_4)", 13, 2), lines) == "Cart.add"
    assert js_function_name(fn("(anonymous_5)", 15, 2), lines) is None  # _secret
    assert js_function_name(fn("(anonymous_1)", 8, 23), lines) is None  # reduce's callback
    assert js_function_name(fn("x", 99, 0), lines) is None
    shorthand = ["module.exports = {", "  total(items) {", "  },", "};"]
    assert js_function_name(fn("(anonymous_0)", 2, 2), shorthand) == "total"


def test_coverage_v8_reports_are_read_into_ratios_and_uncalled_exports() -> None:
    root = "/project/units/cart/"
    summary = {
        "total": {"lines": {"total": 11, "covered": 6}, "branches": {"total": 2, "covered": 1}},
        f"{root}code/cart.js": {
            "lines": {"total": 11, "covered": 6}, "branches": {"total": 2, "covered": 1}
        },
    }
    final = {
        f"{root}code/cart.js": {
            "fnMap": {"0": fn("sign", 1, 9), "1": fn("total", 7, 9), "2": fn("(a)", 10, 15)},
            "f": {"0": 1, "1": 0, "2": 3},
        },
        f"{root}tests/cart.spec.js": {"fnMap": {"0": fn("t", 1, 0)}, "f": {"0": 0}},
    }
    cov = parse_node(
        summary, final, source_of({"code/cart.js": JS_CODE}), lambda p: p.removeprefix(root)
    )
    assert cov == CodeCoverage(
        lines=0.5455, branches=0.5,
        files={"code/cart.js": FileCoverage(lines=0.5455, branches=0.5)},
        unexecuted=["code/cart.js: total"],
    )
    assert parse_node({"total": {"lines": {}}}, final, source_of({}), str) is None
    assert parse_node("nope", final, source_of({}), str) is None
    broken_final = parse_node(summary, {"x": 1}, source_of({}), lambda p: p.removeprefix(root))
    assert broken_final is not None and broken_final.unexecuted == []


def test_the_self_check_names_uncalled_exports_of_a_green_run_only() -> None:
    cov = {"unexecuted": ["code/a.py: f", "code/a.py: C.m"]}
    assert unexecuted_problems({"ok": True, "coverage": cov}) == [
        "no test executes code/a.py: f(), code/a.py: C.m(); write a test that calls each"
    ]
    assert unexecuted_problems({"ok": False, "coverage": cov}) == []
    assert unexecuted_problems({"ok": True}) == [] and unexecuted_problems(None) == []
    assert unexecuted_problems({"ok": True, "coverage": {"unexecuted": "x"}}) == []
