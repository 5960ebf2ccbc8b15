"""Imports of other units are checked before a run: each problem names the file and line,
the unit and the name, and the fix."""

from __future__ import annotations

from devloop.upstream.imports import Scope, import_problems
from devloop.upstream.layout import UnitCode

MONEY = {"exports": {"module": {"code/money.py": {"add(a, b)": "-> int"}},
                     "errors": {"BadAmount": "ValueError"}}}
TAX = {"exports": {"module": {"code/tax.py": {"rate()": "-> int"}}}}
CART = {"exports": {"module": {"code/cart.py": {"total(p)": "-> int"}}}}


def scope(**overrides: object) -> Scope:
    fields: dict[str, object] = {
        "unit": "cart", "stack": "python",
        "present": {"money": UnitCode("money", {"money.py": b""}, MONEY)},
        "project": {"money": MONEY, "tax": TAX, "cart": CART}, "depends_on": ("money",),
    }
    fields.update(overrides)
    return Scope(**fields)  # type: ignore[arg-type]


def problems(text: str, **overrides: object) -> list[str]:
    return import_problems(scope(**overrides), {"code/cart.py": text})


def test_what_the_contract_exports_imports_cleanly() -> None:
    assert problems("from units.money import add, BadAmount\n"
                    "from units.money.money import add\nimport units.money.money\n") == []


def test_a_bare_import_of_a_dependencys_module_names_its_package() -> None:
    assert problems("import os\n\nfrom money import add\n") == [
        "code/cart.py:3: imports money, which is unit money's module code/money.py; a unit's "
        "code is imported as its package, units.money; fix: from units.money.money import add "
        "(or from units.money import add)"
    ]


def test_a_unit_that_is_no_dependency_is_named_and_so_is_the_fix() -> None:
    [problem] = problems("from units.tax.tax import rate\n")
    assert problem.startswith("code/cart.py:1: imports units.tax.tax: unit tax is not among "
                              "cart's depends_on (money), so its code is not there; fix: do not "
                              "import tax")


def test_a_dependency_that_has_not_passed_is_named() -> None:
    [problem] = problems("from units.money import add\n", present={},
                         absent={"money": "it has not passed (it is coding)"})
    assert "unit money's code is not there: it has not passed (it is coding)" in problem
    assert "fix: wait for money to pass" in problem


def test_a_name_the_contract_does_not_export_is_named_with_what_it_does() -> None:
    assert problems("from units.money.money import add, subtract\n") == [
        "code/cart.py:1: imports subtract from units.money.money: unit money's contract does "
        "not export it (it exports BadAmount, add); fix: use what the contract exports, or "
        "ask for the contract to change"
    ]


def test_a_module_of_the_units_own_shadows_nothing() -> None:
    files = {"code/cart.py": "from money import add\n", "code/money.py": "def add(): ...\n"}
    assert import_problems(scope(), files) == []


def test_node_requires_are_checked_the_same_way() -> None:
    db = {"exports": {"module": {"code/db.js": {"openDb()": "-> repo"}}}}
    node = scope(stack="node", unit="api", depends_on=("todo-db",),
                 present={"todo-db": UnitCode("todo-db", {"db.js": b""}, db, "node")},
                 project={"todo-db": db, "api": {}, "other": {}})
    ok = ("const { openDb } = require('@units/todo-db/db.js');\n"
          "const db = require('@units/todo-db');\n")
    assert import_problems(node, {"code/server.js": ok}) == []
    bad = ("const { openDb, drop } = require('@units/todo-db/db');\n"
           "import x from '@units/other/x.js';\n")
    found = import_problems(node, {"code/server.js": bad})
    assert found[0].startswith("code/server.js:2: requires @units/other/x.js: unit other is not "
                               "among api's depends_on (todo-db)")
    assert found[1].startswith("code/server.js:1: imports drop from @units/todo-db/db: unit "
                               "todo-db's contract does not export it (it exports openDb)")
