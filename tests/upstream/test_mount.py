"""A dependent unit's runs import its dependencies' passed code; its view never holds it:
`Read` finds no upstream code, Bash cannot reach it, and what is not there is named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from devloop.agent.bash_tool import BashTool
from devloop.agent.fs_tools import ReadInput, ReadTool
from devloop.core.config import Settings
from devloop.core.contracts import hash_contract
from devloop.project.load import load_project
from devloop.roles.runtime import Prepared, RoleRequest, prepare
from devloop.scaffold import scaffold
from devloop.store import RedisStore, UnitState
from devloop.upstream.mount import unit_code

pytestmark = pytest.mark.timeout(300)

SPEC = """\
company_id: c-acme
project_id: p-shop
stack: python
units:
  - id: money
    kind: lib
    exports: {module: {code/money.py: {"add(a_cents, b_cents)": "-> int"}}}
    acceptance: ["add(250, 100) returns 350"]
  - id: cart
    kind: lib
    depends_on: [money]
    exports: {module: {code/cart.py: {"total(prices_cents)": "-> int"}}}
    consumes: [{unit: money, uses: [add]}]
    acceptance: ["total([250, 100]) returns 350"]
"""
MONEY = "def add(a_cents, b_cents):\n    return a_cents + b_cents\n"
CART = ("import functools\n\nfrom units.money import add\n\n\n"
        "def total(prices_cents):\n    return functools.reduce(add, prices_cents, 0)\n")
TESTS = ("from cart import total\n\n\ndef test_total_of_250_and_100_returns_350():\n"
         "    assert total([250, 100]) == 350\n")


def write(folder: Path, rel: str, text: str) -> None:
    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (folder / rel).write_text(text)


@pytest.fixture
def shop(tmp_path: Path, redis_store: RedisStore) -> Path:
    """The two-unit shop in Redis: money passed with real code; cart with code and tests."""
    (tmp_path / "spec.yaml").write_text(SPEC)
    folder = tmp_path / "shop"
    scaffold(tmp_path / "spec.yaml", folder, script=False)
    project = load_project(folder)
    contract = {"unit_id": "money", **project.sdd_contracts["money"]}
    contract["version"] = hash_contract(contract)
    write(folder, "units/money/code/money.py", MONEY)
    write(folder, "units/money/contract.json", json.dumps(contract))
    write(folder, "units/cart/code/cart.py", CART)
    write(folder, "units/cart/tests/test_cart.py", TESTS)
    redis_store.import_project(load_project(folder))
    redis_store.put_state("p-shop", "money", UnitState(status="passed", attempt=1))
    return folder


@pytest.fixture
def tester(shop: Path, redis_store: RedisStore, settings: Settings,
           python_toolchain_dir: Path) -> Iterator[Prepared]:
    request = RoleRequest("p-shop", "cart", "tester", "implement", 1, run_id="run-1-1")
    p = prepare(redis_store, settings, request, lambda event: None)
    yield p
    p.ws.cleanup()


def run(p: Prepared, run_id: str = "run-1-1") -> dict[str, object]:
    assert p.services.runner is not None
    outcome = p.services.runner.run(view=p.ctx.view, unit_id="cart", run_id=run_id, attempt=1,
                                    retry_budget_left=4)
    return outcome.result.to_json_dict()


def test_the_run_imports_the_passed_code_the_view_does_not_hold(tester: Prepared) -> None:
    result = run(tester)
    assert result["ok"], result
    assert result["summary"] == {"total": 1, "passed": 1, "failed": 0, "skipped": 0}
    view = tester.ctx.view
    assert (view / "units/money/contract.json").is_file()
    assert not (view / "units/money/code").exists()
    read = ReadTool().run(tester.ctx, ReadInput(path="../money/code/money.py"))
    assert read.is_error and "no such file" in read.text
    # Bash runs in the view alone: the tree the runs import is not bound there.
    bash = BashTool().execute(tester.ctx, {"command": "ls /upstream; cat ../money/code/money.py"})
    assert "No such file" in bash.text and "a_cents + b_cents" not in bash.text


def test_the_tree_goes_with_the_view(tester: Prepared) -> None:
    upstream = tester.services.upstream
    assert upstream is not None and upstream.root is not None
    root = upstream.root
    assert (root / "python/units/money/money.py").read_text() == MONEY
    tester.ws.cleanup()
    assert not root.exists()


def test_a_name_the_contract_does_not_export_goes_to_the_coder(
    shop: Path, redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path
) -> None:
    files = redis_store.unit_files("p-shop", "cart")
    code = {"code/cart.py": b"from units.money.money import add, subtract\n"}
    redis_store.commit_files("p-shop", "cart", base_version=files.version, role="coder",
                             attempt=1, changes=code)
    p = prepare(redis_store, settings, RoleRequest("p-shop", "cart", "tester", "implement", 1,
                                                   run_id="run-1-1"), lambda event: None)
    try:
        result = run(p)
    finally:
        p.ws.cleanup()
    assert result["crashed"] and result["next_action"] == "retry_coder"
    assert str(result["crash_reason"]).startswith(
        "the code imports what its dependencies do not provide: code/cart.py:1: imports "
        "subtract from units.money.money: unit money's contract does not export it (it "
        "exports add)")


def test_a_dependency_that_has_not_passed_is_not_there_and_is_named(
    shop: Path, redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path
) -> None:
    redis_store.put_state("p-shop", "money", UnitState(status="coding", attempt=2))
    p = prepare(redis_store, settings, RoleRequest("p-shop", "cart", "tester", "implement", 1,
                                                   run_id="run-1-1"), lambda event: None)
    try:
        assert p.services.upstream is not None and p.services.upstream.root is None
        result = run(p)
    finally:
        p.ws.cleanup()
    assert result["next_action"] == "retry_coder"
    assert "unit money's code is not there: it has not passed (it is coding)" in str(
        result["crash_reason"])


def test_a_dependency_running_again_lends_the_code_that_passed(
    shop: Path, redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path
) -> None:
    assert redis_store.keep_passed("p-shop", "money")[0] is None
    files = redis_store.unit_files("p-shop", "money")
    half = {"code/money.py": b"def add(a_cents, b_cents):\n    raise NotImplementedError\n"}
    redis_store.commit_files("p-shop", "money", base_version=files.version, role="coder",
                             attempt=2, changes=half)
    redis_store.put_state("p-shop", "money", UnitState(status="coding", attempt=2))
    p = prepare(redis_store, settings, RoleRequest("p-shop", "cart", "tester", "implement", 1,
                                                   run_id="run-1-1"), lambda event: None)
    try:
        assert run(p)["ok"]
    finally:
        p.ws.cleanup()


def test_the_passed_code_dependents_import_never_carries_an_artifact() -> None:
    passed = {
        "code/money.py": b"def add(a, b):\n    return a + b\n",
        "code/__pycache__/money.cpython-311.pyc": b"\xa7\r\r\n\x01\0\0\0",
        "code/money.cpython-311-x86_64-linux-gnu.so": b"\x7fELF",
        "code/.git/config": b"[core]\n\tfsmonitor = touch /tmp/x\n",
        "contract.json": b"{}",
    }
    assert sorted(unit_code("money", passed, "python", "lib").files) == ["money.py"]
