"""The pure parts of "tests that can fail": the python hollow build, which tests exercise
which criterion, and the adequacy verdict. No servers: real runs are in
tests/runners/test_hollow_run.py."""

from __future__ import annotations

import types

import pytest

from devloop.roles import adequacy
from devloop.roles import coverage as cov
from devloop.roles.mutation import sample
from devloop.runners import mutants_py
from devloop.runners.hollow_py import HollowError, hollow_python

MODULE = '''\
"""A module."""
from __future__ import annotations


class Repo:
    def __init__(self):
        self.items = {}

    def add(self, key, value):
        self.items[key] = value

    def get(self, key):
        return self.items.get(key)


def double(x):
    return x * 2


def count_up(n):
    yield from range(n)


async def later(x):
    return x


triple = lambda x: x * 3  # noqa: E731
BUILT = Repo()
BUILT.add("k", double(2))
'''


def load(source: str) -> types.ModuleType:
    module = types.ModuleType("hollowed")
    exec(compile(source, "code/hollowed.py", "exec"), module.__dict__)
    return module


def test_a_hollow_module_imports_and_sets_up_for_real_but_does_nothing_in_a_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = hollow_python(MODULE, "code/m.py")
    assert source.startswith('"""A module."""\nfrom __future__ import annotations\n')
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_m.py::test_x (setup)")
    module = load(source)  # import time and fixtures: the code runs as written
    assert module.BUILT.get("k") == 4 and module.double(3) == 6
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_m.py::test_x (call)")
    nothing = module.double(3)
    assert nothing is not None and nothing != 6 and nothing != 0 and (nothing == nothing) is False
    with pytest.raises(TypeError):
        bool(nothing)  # `assert f()` and `assert not f()` both fail on it
    assert module.triple(2) is nothing and module.BUILT.get("k") is nothing
    assert list(module.count_up(3)) == []
    with pytest.raises(StopIteration) as returned:
        module.later(1).send(None)  # a coroutine that returns at once, without a loop
    assert returned.value.value is nothing
    assert module.Repo().__dict__ == {}  # a constructor that does nothing


def test_a_module_that_does_not_parse_has_no_hollow_build() -> None:
    with pytest.raises(HollowError, match="code/bad.py does not parse"):
        hollow_python("def f(:\n", "code/bad.py")


def blocks(text: str) -> list[cov.TestBlock]:
    return cov.blocks({"tests/test_u.py": text}, "python")


TOTALS = ["total([]) returns 0", "total([250, 100]) returns 350"]


def test_one_test_named_after_several_criteria_exercises_the_ones_whose_values_it_uses() -> (
    None
):
    tests = blocks(
        "def test_total_of_empty_returns_0_and_of_250_and_100_returns_350():\n"
        "    assert total([250, 100]) == 350\n"
    )
    assert cov.uncovered_criteria(TOTALS, tests) == ["total([]) returns 0"]
    js = cov.blocks(
        {"tests/t.test.js": "it('total([]) returns 0 and total([250, 100]) returns 350', () => "
         "{ expect(total([])).toBe(0) })\n"},
        "node",
    )
    assert cov.uncovered_criteria(TOTALS, js) == ["total([250, 100]) returns 350"]


def test_a_named_test_of_one_criterion_exercises_it_and_values_alone_do_too() -> None:
    named = blocks("def test_total_returns_0_for_an_empty_list():\n    assert total([]) == 0\n")
    assert cov.uncovered_criteria(TOTALS, named) == ["total([250, 100]) returns 350"]
    unnamed = blocks("def test_sum():\n    assert total([250, 100]) == 350\n")
    assert cov.uncovered_criteria(TOTALS, unnamed) == ["total([]) returns 0"]
    params = blocks(
        "import pytest\n@pytest.mark.parametrize('qty', [0, -1])\n"
        "def test_check(qty):\n    assert line_total(5, qty) is None\n"
    )
    assert cov.uncovered_criteria(["line_total(5, -1) raises ValueError"], params) == []


def test_a_status_code_counts_in_a_test_s_code_not_in_its_comments_or_title() -> None:
    tests = cov.blocks(
        {"tests/a.test.js": "it('answers 201', async () => { /* 200 */ // 404\n"
         "  expect(res.status).toBe(400) })\n"},
        "node",
    )
    assert cov.uncovered_codes(["200", "201", "400", "404"], tests) == ["200", "201", "404"]
    py = blocks('def test_x():\n    """201"""\n    # 200\n    assert status == 404\n')
    assert cov.uncovered_codes(["200", "201", "404"], py) == ["200", "201"]


CRITERIA = ["value() returns 42", "double(4) returns 8"]
SUITE = blocks(
    "def test_value_returns_42():\n    assert value() == 42\n\n"
    "def test_double_4_returns_8():\n    assert True or 8\n"
)
VALUE, DOUBLE = (f"tests/test_u.py::{b.name}" for b in SUITE)


def test_a_criterion_whose_tests_pass_on_the_hollow_build_is_named_with_them() -> None:
    proof = adequacy.judge(
        SUITE, "python", frozenset({VALUE, DOUBLE}), frozenset({DOUBLE}), frozenset({VALUE}),
        CRITERIA, [],
    )
    assert [p.proving for p in proof.criteria] == [[VALUE], []]
    assert proof.cannot_fail == [DOUBLE] and proof.criteria_proven == 0.5
    [problem] = adequacy.problems(proof)
    assert problem.startswith("acceptance criterion 'double(4) returns 8' is not proven: ")
    assert DOUBLE in problem and "assert the result it must give (4, 8)" in problem


def test_tests_the_run_named_otherwise_are_not_taken_as_proof() -> None:
    """A computed title the source cannot match proves nothing rather than passing."""
    proof = adequacy.judge(
        SUITE, "python", frozenset({VALUE}), frozenset(), frozenset({VALUE}), CRITERIA, []
    )
    [problem] = adequacy.problems(proof)
    assert "'double(4) returns 8'" in problem and "reported none of its tests" in problem


def test_vitest_names_match_by_file_and_title_under_their_describe() -> None:
    js = cov.blocks({"tests/a.test.js": "describe('cart', () => { it('adds', () => {}) })"},
                    "node")
    ran = {"tests/a.test.js::cart adds", "tests/b.test.js::cart adds", "tests/a.test.js::adds x"}
    assert adequacy.block_ids(js[0], ran, "node") == ["tests/a.test.js::cart adds"]
    py = blocks("def test_x(n):\n    pass\n")
    ran = {"tests/test_u.py::test_x[1]", "tests/test_u.py::T::test_x", "tests/test_u.py::test_xy"}
    assert adequacy.block_ids(py[0], ran, "python") == [
        "tests/test_u.py::T::test_x", "tests/test_u.py::test_x[1]"
    ]


def test_an_unmeasured_run_asks_for_nothing() -> None:
    from devloop.core.models import Adequacy

    assert adequacy.problems(None) == []
    assert adequacy.problems(Adequacy(measured=False, reason="the hollow run crashed")) == []


def test_a_docstring_that_is_a_criterion_word_for_word_names_that_one_alone() -> None:
    tests = blocks(
        "def test_02_total_250_100_returns_350():\n"
        "    'total([250, 100]) returns 350'\n    assert cart.total(None) == 0\n"
    )
    assert cov.uncovered_criteria(TOTALS, tests) == ["total([]) returns 0"]


def test_mutants_change_one_operator_or_constant_each_and_skip_docstrings() -> None:
    source = '"""Doc 1."""\n\n\ndef f(a, b):\n    """2 docs."""\n    return a + b > 1 and not a\n'
    assert mutants_py.count(source) == 5
    changes = [mutants_py.mutant(source, i).change for i in range(5)]
    assert changes == ["And -> Or", "Gt -> LtE", "not dropped", "Add -> Sub", "1 -> 2"]
    assert "return a - b > 1 and (not a)" in mutants_py.mutant(source, 3).source
    assert mutants_py.count("def f(:") == 0
    assert sample(20, 4) == [0, 6, 13, 19] and sample(3, 8) == [0, 1, 2]
