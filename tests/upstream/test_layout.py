"""The tree units' code makes when other units import it: one package per unit, imports
of a unit's own modules qualified in place, nothing of two units' same-named modules
mixed up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from devloop.upstream.layout import UnitCode, node_tree, python_tree, qualify_imports
from devloop.upstream.names import import_examples, python_name, python_package

MONEY = {"exports": {"module": {"code/money.py": {"add(a, b)": "-> int",
                                                  "format_cents(c)": "-> str"}}}}


def test_a_units_own_imports_are_qualified_in_place_and_keep_their_lines() -> None:
    source = (
        b"import os, helpers\n"
        b"from helpers import tax as t  # why\n"
        b"from helpersx import y\n"
        b"import pkg.sub\n"
        b"def f():\n"
        b"    import helpers as h; return h\n"
        b"s = '\xc3\xa9'; from pkg import z\n"
    )
    out = qualify_imports(source, "units.money", {"helpers", "pkg"}).decode()
    assert out.splitlines() == [
        "import os; import units.money.helpers as helpers",
        "from units.money.helpers import tax as t  # why",
        "from helpersx import y",
        "import units.money.pkg.sub; from units.money import pkg",
        "def f():",
        "    import units.money.helpers as h; return h",
        "s = 'é'; from units.money.pkg import z",
    ]


def test_source_that_does_not_parse_is_left_as_it_is() -> None:
    assert qualify_imports(b"import helpers\nif (:\n", "units.a", {"helpers"}) == (
        b"import helpers\nif (:\n"
    )


def test_unit_ids_become_identifiers_under_units() -> None:
    assert python_package("todo-db") == "units.todo_db"
    assert python_name("2fa") == "u2fa" and python_name("class") == "class_"


def test_the_package_reexports_the_modules_its_contract_lists() -> None:
    tree = python_tree({"money": UnitCode("money", {"money.py": b"def add(a, b): ..."}, MONEY)})
    init = tree.files["python/units/money/__init__.py"].decode()
    assert "from .money import *" in init
    assert import_examples("python", "money", MONEY) == [
        "from units.money.money import add, format_cents"
    ]


def test_two_units_with_modules_of_the_same_name_do_not_collide(tmp_path: Path) -> None:
    """a and b each have code/utils.py, and so does the unit importing both."""
    contract = {"exports": {"module": {"code/main.py": {"VALUE": "int"}}}}
    units = {
        "a": UnitCode("a", {"utils.py": b"X = 'a'\n",
                            "main.py": b"import utils\nVALUE = utils.X\n"}, contract),
        "b": UnitCode("b", {"utils.py": b"X = 'b'\n",
                            "main.py": b"from utils import X as VALUE\n"}, contract),
    }
    for rel, data in python_tree(units).files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    own = tmp_path / "own"
    own.mkdir()
    (own / "utils.py").write_text("X = 'own'\n")
    probe = ("import utils; from units.a.main import VALUE as A; from units.b import VALUE as B; "
             "print(utils.X, A, B)")
    path = [str(own), str(tmp_path / "python")]
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path[:0] = {path!r}; {probe}"],
        capture_output=True, text=True, timeout=30,
    )
    assert done.stdout.split() == ["own", "a", "b"], done.stderr


def test_a_node_unit_is_a_package_whose_one_contract_module_is_main() -> None:
    contract = {"exports": {"module": {"code/db.js": {"openDb()": "-> repo"}}}}
    tree = node_tree({"todo-db": UnitCode("todo-db", {"db.js": b"module.exports = {}\n"},
                                          contract, "node")})
    manifest = json.loads(tree.files["node_modules/@units/todo-db/package.json"])
    assert manifest == {"name": "@units/todo-db", "private": True, "type": "commonjs",
                        "main": "db.js"}
    assert import_examples("node", "todo-db", contract) == [
        "const { openDb } = require('@units/todo-db/db.js')"
    ]
