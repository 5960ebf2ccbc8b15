"""`devloop mutants DIR`: each python unit's mutation score, written for the report; real
pytest in the real sandbox over a project folder a tester would have left."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from devloop.report import build_report
from tests.proctree import run_bounded

SPEC = """\
company_id: c-acme
project_id: p-calc
stack: python
units:
  - id: calc
    kind: lib
    exports:
      module:
        code/calc.py:
          "double(x)": "-> int"
    acceptance:
      - double(4) returns 8
"""
CODE = "def double(x):\n    return x * 2\n"
# Its two mutants are `*` -> `//` and `2` -> `3`: this test notices both.
TESTS = "from calc import double\n\n\ndef test_double_4_returns_8():\n    assert double(4) == 8\n"
DEVLOOP = [sys.executable, "-m", "workers.main"]


def project(tmp_path: Path) -> Path:
    (tmp_path / "spec.yaml").write_text(SPEC)
    root = tmp_path / "calc"
    made = run_bounded([*DEVLOOP, "new", str(root), "--from", str(tmp_path / "spec.yaml")],
                       timeout=120)
    assert made.returncode == 0, made.stderr
    unit = root / "units" / "calc"
    (unit / "code").mkdir(exist_ok=True)
    (unit / "tests").mkdir(exist_ok=True)
    (unit / "code" / "calc.py").write_text(CODE)
    (unit / "tests" / "test_calc.py").write_text(TESTS)
    return root


def test_mutants_scores_each_python_unit_and_the_report_shows_it(tmp_path: Path) -> None:
    root = project(tmp_path)
    done = run_bounded([*DEVLOOP, "mutants", str(root), "--sample", "4"], timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "calc" in done.stdout and "2/2 of 2" in done.stdout
    saved = json.loads((root / "agent-state" / "mutation.json").read_text())
    assert saved["calc"]["score"] == 1.0 and saved["calc"]["survived"] == []
    assert "mutation score 1.00: the tests noticed 2 of 2 small changes" in build_report(root)


def test_mutants_names_the_units_it_can_measure_when_given_another(tmp_path: Path) -> None:
    root = project(tmp_path)
    done = run_bounded([*DEVLOOP, "mutants", str(root), "--unit", "nope"], timeout=120)
    assert done.returncode == 2
    assert "--unit: option: 'nope' is not a python unit with tests; fix: use one of: calc" in (
        done.stdout + done.stderr
    )
    assert not (root / "agent-state" / "mutation.json").exists()
