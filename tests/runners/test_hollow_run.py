"""Tests that cannot fail are caught: a green run once more against a hollow build of code/.

Real pytest and vitest in the real sandbox. The python unit has `value()` right and
`double(x)` wrong (it returns x); the weak testers of the issue all go green over it, and
the hollow run shows which criteria their tests do not prove.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from devloop.core.config import Settings
from devloop.core.models import Adequacy
from devloop.roles import adequacy, checks
from devloop.roles.adequacy import Claims
from devloop.roles.hollowrun import hollow_check
from devloop.roles.mutation import mutation_score
from devloop.runners import PytestRunner, VitestRunner
from devloop.runners.base import TestRunner
from devloop.sandbox import BwrapSandbox, new_view_dir

UNIT = "calc"
CRITERIA = ["value() returns 42", "double(4) returns 8"]
CODE = '''\
"""A unit whose double() is wrong."""


def value():
    """The answer."""
    return 42


def double(x):
    """Should be x * 2; the coder got it wrong."""
    return x
'''
GOOD_VALUE = '''
def test_value_returns_42():
    assert value() == 42
'''
WEAK = {
    "empty bodies": '''
def test_value_returns_42():
    pass

def test_double_4_returns_8():
    pass
''',
    "assert True": '''
def test_value_returns_42():
    assert True

def test_double_4_returns_8():
    assert True
''',
    "swallowed assertions": '''
def test_value_returns_42():
    try:
        assert value() == 42
    except Exception:
        pass

def test_double_4_returns_8():
    try:
        assert double(4) == 8
    except Exception:
        pass
''',
    "own arithmetic, no call into code/": '''
def test_value_returns_42():
    assert 40 + 2 == 42

def test_double_4_returns_8():
    assert 4 * 2 == 8
''',
    "one real, one empty": GOOD_VALUE + '''
def test_double_4_returns_8():
    pass
''',
}


@pytest.fixture(scope="module")
def runner(sandbox: BwrapSandbox, python_toolchain_dir: Path) -> PytestRunner:
    return PytestRunner(sandbox, python_toolchain_dir)


def unit_view(settings: Settings, files: dict[str, str]) -> Path:
    """A fresh view holding units/calc with these files."""
    view = new_view_dir(settings, prefix="hollow-test-")
    for rel, text in files.items():
        path = view / "units" / UNIT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return view


def prove(
    runner: TestRunner, settings: Settings, files: dict[str, str], claims: Claims
) -> tuple[bool, Adequacy | None, list[str]]:
    """(the real run's verdict, what the hollow run found, the self-check's items about
    the tests: the static ones and the hollow run's)."""
    view = unit_view(settings, files)
    try:
        real = runner.run(view=view, unit_id=UNIT, run_id="run-1-1", attempt=1, retry_budget_left=3)
        proof = hollow_check(runner, settings, view, real, claims)
        static = checks.static_test_problems(
            view / "units" / UNIT, claims.stack, claims.criteria, claims.status_codes
        )
        return real.result.ok, proof, static + adequacy.problems(proof)
    finally:
        shutil.rmtree(view, ignore_errors=True)


def python_files(tests: str) -> dict[str, str]:
    return {"code/calc.py": CODE, "tests/test_calc.py": "from calc import double, value\n" + tests}


@pytest.mark.parametrize("case", sorted(WEAK))
def test_each_weak_tester_is_green_over_wrong_code_and_refused_naming_the_criterion(
    runner: PytestRunner, settings: Settings, case: str
) -> None:
    ok, proof, problems = prove(
        runner, settings, python_files(WEAK[case]), Claims("python", CRITERIA)
    )
    assert ok, "the weak tests pass over the wrong double(): what the hollow run is for"
    assert proof is not None and proof.measured, proof
    # Each weak criterion is named: as exercised by no test (no value of it in any
    # test's code), or as not proven by tests that pass on the hollow build.
    double = [p for p in problems if "'double(4) returns 8'" in p]
    assert double, problems
    if "is not proven" in double[0]:
        assert "test_double_4_returns_8" in double[0] and "assert the result" in double[0]
    # A criterion tested for real is proven; one tested weakly is not.
    value_proven = case == "one real, one empty"
    assert any("'value() returns 42'" in p for p in problems) is not value_proven


def test_tests_that_call_the_code_and_assert_prove_every_criterion_and_fail_on_hollow(
    runner: PytestRunner, settings: Settings
) -> None:
    right = CODE.replace("    return x\n", "    return x * 2\n")
    tests = GOOD_VALUE + "\ndef test_double_4_returns_8():\n    assert double(4) == 8\n"
    files = python_files(tests) | {"code/calc.py": right}
    ok, proof, problems = prove(runner, settings, files, Claims("python", CRITERIA))
    assert ok and proof is not None and proof.measured
    assert problems == []
    assert proof.criteria_proven == 1.0 and proof.cannot_fail == []
    assert [p.proving for p in proof.criteria] == [
        ["tests/test_calc.py::test_value_returns_42"],
        ["tests/test_calc.py::test_double_4_returns_8"],
    ]


def test_set_up_in_a_fixture_stays_real_and_a_test_calling_nothing_is_still_caught(
    runner: PytestRunner, settings: Settings
) -> None:
    """Fixtures and import time run the real code: only what a test body calls is hollow."""
    code = CODE.replace("    return x\n", "    return x * 2\n") + '''

class Box:
    def __init__(self, n):
        self.n = n

    def doubled(self):
        return double(self.n)


BUILT_AT_IMPORT = Box(1)
'''
    tests = '''
import pytest
from calc import Box

@pytest.fixture
def box():
    return Box(4)

def test_double_4_returns_8(box):
    assert box.doubled() == 8

def test_value_returns_42(box):
    assert box.n == 4
'''
    files = {"code/calc.py": code, "tests/test_calc.py": tests}
    ok, proof, _ = prove(runner, settings, files, Claims("python", CRITERIA))
    assert ok and proof is not None and proof.measured, proof
    assert proof.cannot_fail == ["tests/test_calc.py::test_value_returns_42"]
    assert [bool(p.proving) for p in proof.criteria] == [False, True]


NODE_APP = '''\
const express = require('express');
function createApp() {
  const app = express();
  app.use(express.json());
  app.post('/todos', (req, res) => {
    if (!req.body.title) return res.status(400).json({ error: 'title required' });
    res.status(201).json({ id: 1, title: req.body.title });
  });
  app.get('/todos', (req, res) => res.json([]));
  return app;
}
const double = (x) => x * 2;
module.exports = { createApp, double };
'''
NODE_TESTS = '''\
const request = require('supertest');
const { createApp, double } = require('../code/app.js');
let app;
beforeEach(() => { app = createApp(); });
it('a todo with a title is created with 201', async () => {
  const res = await request(app).post('/todos').send({ title: 'milk' });
  expect(res.status).toBe(201);
  expect(res.body.title).toBe('milk');
});
it('a missing title is rejected with 400', async () => {
  const res = { status: 400 }; // never sent: proves nothing
  expect(res.status).toBe(400);
});
it('double(4) returns 8', () => { expect(double(4)).toBe(8); });
it('GET /todos lists nothing at first', async () => {
  const res = await request(app).get('/todos');
  expect(Array.isArray(res.body) || true).toBe(true);
});
'''


def test_node_routes_answer_501_and_arrows_do_nothing_on_the_hollow_build(
    sandbox: BwrapSandbox, node_toolchain_dir: Path, settings: Settings
) -> None:
    runner = VitestRunner(sandbox, node_toolchain_dir / "node_modules")
    claims = Claims(
        "node",
        ["a todo with a title is created with 201", "a missing title is rejected with 400",
         "double(4) returns 8"],
        ["201", "400"],
    )
    files = {"code/app.js": NODE_APP, "tests/app.test.js": NODE_TESTS}
    ok, proof, problems = prove(runner, settings, files, claims)
    assert ok and proof is not None and proof.measured, proof
    by_name = {p.criterion: p for p in proof.criteria}
    assert by_name["a todo with a title is created with 201"].proving
    assert by_name["double(4) returns 8"].proving
    assert not by_name["a missing title is rejected with 400"].proving
    codes = {p.criterion: bool(p.proving) for p in proof.status_codes}
    assert codes == {"201": True, "400": False}  # its 400 was never the code's
    assert proof.cannot_fail == [
        "tests/app.test.js::GET /todos lists nothing at first",
        "tests/app.test.js::a missing title is rejected with 400",
    ]
    assert any("'a missing title is rejected with 400' is not proven" in p for p in problems)
    assert any(p.startswith("status 400 is not proven") for p in problems)


def test_a_mutation_score_counts_the_small_changes_the_tests_notice(
    runner: PytestRunner, settings: Settings
) -> None:
    right = CODE.replace("    return x\n", "    return x * 2\n")
    view = unit_view(settings, python_files(WEAK["one real, one empty"]) | {"code/calc.py": right})
    try:
        score = mutation_score(runner, settings, view, UNIT, n=4)
    finally:
        shutil.rmtree(view, ignore_errors=True)
    # `return 42` -> 43 is caught by the real test; double()'s two survive its empty one.
    assert (score.sites, score.run, score.killed) == (3, 3, 1) and score.score == 0.333
    assert score.survived == ["code/calc.py:11 Mult -> FloorDiv", "code/calc.py:11 2 -> 3"]


def test_tests_that_stop_the_run_on_hollow_code_instead_of_failing_are_held_back(
    runner: PytestRunner, settings: Settings
) -> None:
    """A hostile tester cannot slip past by crashing where a test should fail."""
    tests = '''
import os
from calc import double, value

def test_value_returns_42():
    assert value() == 42

def test_double_4_returns_8():
    if not isinstance(double(4), int):
        os._exit(0)  # on hollow code: end the run rather than fail
'''
    ok, proof, problems = prove(runner, settings, python_files(tests), Claims("python", CRITERIA))
    assert ok and proof is not None and not proof.measured and proof.tests_fault
    assert any(p.startswith("the tests crashed on the hollow build: ") for p in problems)
