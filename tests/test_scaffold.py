"""`devloop new`: a spec YAML scaffolds a valid project whose trivial script runs green on the
fleet, and every mistake in the YAML is one line naming its line, field and fix, with nothing
written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devloop.cli.commands import app
from devloop.core.contracts import hash_contract
from devloop.llm.stub import Script, Turn
from devloop.project.load import load_project
from devloop.scaffold import (
    NewProject,
    NewUnit,
    SpecInvalid,
    dump_script,
    scaffold,
    trivial_script,
)
from tests.proctree import run_bounded

DEVLOOP = Path(sys.executable).parent / "devloop"
REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
RUN_TIMEOUT_S = 400

# Line numbers matter: the error tests below name them.
SHOP = """\
company_id: c-acme
project_id: p-shop
stack: python
conventions: |
  Standard library only; money in integer cents.
units:
  - id: stock
    kind: lib
    exports: {module: {"code/stock.py": {"reserve(sku, qty)": "-> bool", "level(sku)": "-> int"}}}
    acceptance:
      - reserve() refuses more than the stock & says so
      - level() reports what is left <after> a reservation
  - id: prices
    kind: db
    exports: {module: {"code/prices.py": {"price_of(sku)": "-> int"}}}
    acceptance: [price_of() answers integer cents]
  - id: orders
    kind: be
    depends_on: [stock, prices]
    exports:
      module: {"code/orders.py": {"place(order)": "-> dict"}}
      http:
        - {method: POST, path: /orders, responses: {"201": {id: number}, "409": {error: out}}}
    consumes: [{unit: stock, module: reserve}, {unit: prices, module: price_of}]
    acceptance:
      - place() takes stock and returns the order
  - id: report
    kind: lib
    depends_on: [orders]
    exports: {module: {"code/report.py": {"summary(orders)": "-> str"}}}
    acceptance: [summary() names every order]
"""

WEB = """\
company_id: c-acme
project_id: p-web
stack: node
units:
  - id: api
    kind: be
    exports:
      module: {"code/server.js": "module.exports = app"}
      http:
        - {method: POST, path: /api/items, responses: {"201": {id: number}, "400": {error: e}}}
        - {method: GET, path: "/api/items/{id}", responses: {"200": {id: number}}}  # OpenAPI
    acceptance: [A created item can be fetched]
  - id: util
    kind: mw
    exports: {module: {"code/util.js": "ready()"}}
    acceptance: [ready() names the unit]
  - id: ui
    kind: fe
    depends_on: [api, util]
    exports: {components: [{name: ItemList, file: code/ItemList.vue}]}
    consumes: [{unit: api, http: "GET /api/items/:id"}]
    acceptance: [Shows the unit id]
  - id: tally
    kind: lib
    stack: python
    depends_on: [ui]
    exports: {module: {"code/tally.py": {"count()": "-> int"}}}
    acceptance: [count() starts at zero]
"""


# tests/data/stub-per-unit-sessions.yaml is what `devloop new` wrote for this spec before
# templates.
PAIR = """\
company_id: c-acme
project_id: p-pair
stack: python
units:
  - id: stock
    kind: lib
    exports: {module: {"code/stock.py": {"level(sku)": "-> int"}}}
    acceptance: [level() reports what is left]
  - id: orders
    kind: be
    depends_on: [stock]
    exports: {module: {"code/orders.py": {"place(order)": "-> dict"}}}
    consumes: [{unit: stock, module: level}]
    acceptance: [place() checks the level and returns the order]
"""


def write_spec(tmp_path: Path, text: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return spec


def problems_of(spec: Path, dest: Path) -> list[str]:
    """The problem lines scaffold reports; and it must have written nothing."""
    with pytest.raises(SpecInvalid) as caught:
        scaffold(spec, dest)
    assert not dest.exists()
    return [str(p) for p in caught.value.problems]


def run_fleet(project: Path) -> subprocess.CompletedProcess[str]:
    return run_bounded(
        [str(DEVLOOP), "run", str(project), "--llm", "stub", "--workers", "2"],
        timeout=RUN_TIMEOUT_S,
    )


def assert_all_passed_first_time(project: Path) -> None:
    """Every unit's single attempt was decided `pass` after a green run of real tests."""
    steps = [json.loads(line) for line in (project / "agent-state/fleet-steps.ndjson").open()]
    decided = {s["msg"]["unit_id"]: s["status"] for s in steps if s["role"] == "decide"}
    units = [u.id for u in load_project(project).units.units]
    assert decided == dict.fromkeys(units, "pass")
    assert all(s["attempt"] == 1 for s in steps)
    for unit in units:
        result = json.loads((project / f"units/{unit}/runs/run-1-1/result.json").read_text())
        assert result["ok"] and result["summary"]["failed"] == 0
        assert result["summary"]["passed"] == result["summary"]["total"] >= 1


# --- round trips --------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_scaffolded_python_project_validates_and_runs_green_on_the_fleet(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    project = tmp_path / "shop"
    report = scaffold(write_spec(tmp_path, SHOP), project)
    assert report.units == 4 and report.script == project / "stub.yaml"
    validated = CliRunner().invoke(app, ["validate", str(project)])
    assert validated.exit_code == 0, validated.stderr
    assert "stock -> orders -> report" in validated.stdout
    done = run_fleet(project)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_all_passed_first_time(project)
    # one test per acceptance criterion, plus one per declared status (orders: 201, 409)
    runs = {
        u: json.loads((project / f"units/{u}/runs/run-1-1/result.json").read_text())
        for u in ("stock", "orders")
    }
    assert runs["stock"]["summary"]["total"] == 2 and runs["orders"]["summary"]["total"] == 3


@pytest.mark.timeout(240)
@pytest.mark.slow
def test_scaffolded_node_project_with_be_fe_and_a_python_unit_runs_green(
    tmp_path: Path, node_toolchain_dir: Path, python_toolchain_dir: Path
) -> None:
    project = tmp_path / "web"
    scaffold(write_spec(tmp_path, WEB), project)
    done = run_fleet(project)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert_all_passed_first_time(project)
    assert (project / "units/ui/code/ItemList.vue").is_file()
    assert (project / "units/tally/code/tally.py").is_file()


# --- what scaffold writes -------------------------------------------------------------


def test_files_follow_the_seed_layout_and_hashes_match_the_escaped_sdd(tmp_path: Path) -> None:
    project = tmp_path / "shop"
    scaffold(write_spec(tmp_path, SHOP), project)
    loaded = load_project(project)  # parses the SDD back: escaping round-trips
    stock = loaded.sdd_contracts["stock"]
    assert loaded.units.unit("stock").contract_hash == hash_contract(stock)  # type: ignore[union-attr]
    assert stock["consumes"] == [] and "code/stock.py" in stock["exports"]["module"]
    assert (
        loaded.sections["stock"].acceptance[0] == "reserve() refuses more than the stock & says so"
    )
    html = (project / "sdd/mvcp/p-shop.html").read_text()
    assert "&lt;after&gt;" in html and "&amp; says so" in html
    spec = json.loads((project / "units/orders/spec.json").read_text())
    assert spec == {
        "unit_id": "orders",
        "kind": "be",
        "depends_on": ["stock", "prices"],
        "acceptance_criteria": ["place() takes stock and returns the order"],
    }
    assert (project / "conventions.md").read_text().startswith("Standard library only")
    assert loaded.derived_specs == set()


def test_trivial_script_writes_each_roles_turns_once_and_each_units_files_in_a_table(
    tmp_path: Path,
) -> None:
    project = tmp_path / "shop"
    scaffold(write_spec(tmp_path, SHOP), project, script=False, latency_ms=150)
    assert not (project / "stub.yaml").exists()
    data = trivial_script(project, latency_ms=150)
    script = Script.from_dict(data)  # raises on any problem
    assert list(data["templates"]) == ["coder.c-acme.p-shop.{unit}", "tester.c-acme.p-shop.{unit}"]
    assert list(data["units"]) == ["stock", "prices", "orders", "report"]
    # The turns are in the file once, whatever the number of units.
    assert dump_script(data).count("update_todo_item") == 5 + 6 + 3 + 3

    def turn(role: str, unit: str, n: int) -> Turn:
        found = script.turn_for(f"{role}.c-acme.p-shop.{unit}", n)
        assert found is not None
        return found

    first = turn("coder", "orders", 1)
    assert first.latency_ms == 150
    writes = {b.tool_use.input["path"]: b.tool_use.input["content"] for b in first.content
              if b.tool_use is not None and b.tool_use.name == "Write"}
    assert sorted(writes) == ["code/orders.py", "contract.json"]
    assert "def place(order) -> dict:" in writes["code/orders.py"]
    contract = json.loads(writes["contract.json"])
    assert contract["version"] == load_project(project).units.unit("orders").contract_hash  # type: ignore[union-attr]
    done = "Implemented orders: code/orders.py, contract.json; contract_bridge ok."
    assert turn("coder", "orders", 2).content[0].text == done
    # Every later attempt, at any turn number: the retry's workflow, then done.
    for n in (3, 41):
        again = [b.tool_use.name for b in turn("coder", "orders", n).content if b.tool_use]
        assert "verify_tests" in again and again.count("Write") == 2
        assert turn("coder", "orders", n + 1).content[0].text == done
    tests = [b.tool_use.input for b in turn("tester", "stock", 1).content
             if b.tool_use is not None and b.tool_use.name == "Write"]
    assert [t["path"] for t in tests] == ["tests/test_stock.py"]
    assert "def test_02_level_reports_what_is_left_after_a_reservation" in tests[0]["content"]
    assert script.turn_for("coder.c-acme.p-shop.orders.reassess.1.1", 1) is not None


def test_a_script_an_earlier_devloop_new_wrote_still_loads_and_serves_the_same_turns(
    tmp_path: Path,
) -> None:
    project = tmp_path / "pair"
    scaffold(write_spec(tmp_path, PAIR), project)
    before = Script.load(REPO / "tests/data/stub-per-unit-sessions.yaml")
    now = Script.load(project / "stub.yaml")
    assert len(before.sessions) == 5 and not before.templates and len(now.templates) == 2
    for role in ("coder", "tester"):
        for unit in ("stock", "orders", "orders.reassess.1.1"):
            key = f"{role}.c-acme.p-pair.{unit}"
            for n in range(1, 10):
                old, new = before.turn_for(key, n), now.turn_for(key, n)
                assert old is not None and new is not None, (key, n)
                assert old.model_dump() == new.model_dump(), (key, n)


@pytest.mark.parametrize("example", ["todo", "inventory"])
def test_each_examples_spec_yaml_scaffolds_that_example(tmp_path: Path, example: str) -> None:
    shipped = EXAMPLES / example
    made = tmp_path / example
    done = run_bounded([str(DEVLOOP), "new", str(made), "--from", str(shipped / "spec.yaml"),
                        "--no-script"], timeout=60)
    assert done.returncode == 0, done.stderr
    ours, theirs = load_project(made), load_project(shipped)
    files = ["units.json", *(f"units/{u.id}/spec.json" for u in theirs.units.units)]
    files += ["conventions.md"] if (shipped / "conventions.md").exists() else []
    for rel in files:
        assert (made / rel).read_bytes() == (shipped / rel).read_bytes(), rel
    assert ours.sdd_contracts == theirs.sdd_contracts
    for unit in theirs.units.units:
        mine, example_section = ours.sections[unit.id], theirs.sections[unit.id]
        assert mine.acceptance == example_section.acceptance
        assert heading(mine.html) == heading(example_section.html)


def heading(section_html: str) -> str:
    found = re.search(r"<h2>(.*?)</h2>", section_html)
    assert found is not None
    return found.group(1)


def test_the_spec_format_doc_shows_a_sample_that_scaffolds_and_names_every_key(
    tmp_path: Path,
) -> None:
    doc = (REPO / "docs/spec-yaml.md").read_text()
    sample = re.search(r"```yaml\n(.*?)```", doc, re.S)
    assert sample is not None
    scaffold(write_spec(tmp_path, sample.group(1)), tmp_path / "out")
    for key in [*NewProject.model_fields, *NewUnit.model_fields]:
        assert f"`{key}`" in doc, key
    assert "docs/spec-yaml.md" in (REPO / "README.md").read_text()


def test_the_readme_quick_start_prints_what_the_readme_shows(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## Running a real project")]
    found = re.search(r"```yaml\n(.*?)```", quick, re.S)
    assert found is not None
    spec = write_spec(tmp_path, found.group(1))
    done = run_bounded([str(DEVLOOP), "new", "shop", "--from", "spec.yaml"], timeout=60,
                       cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"$ devloop new shop --from spec.yaml\n{done.stdout}\n" in quick
    spec.write_text(found.group(1).replace("depends_on: [money]", "depends_on: [mony]")
                    .replace("    acceptance:\n      - total", "    aceptance:\n      - total"))
    typo = run_bounded([str(DEVLOOP), "new", "shop2", "--from", "spec.yaml"], timeout=60,
                       cwd=tmp_path)
    assert typo.returncode == 2
    assert f"$ devloop new shop --from spec.yaml\n{typo.stderr}```" in quick


def modes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): oct(p.stat().st_mode & 0o777) for p in root.rglob("*")}


def test_a_new_folder_is_built_beside_its_place_with_the_modes_a_copy_gets(
    tmp_path: Path,
) -> None:
    # A new DIR is built next to it and renamed into place (each file written once); a DIR
    # that exists is written file by file. Both give folders 0755 and files 0644.
    spec = write_spec(tmp_path, SHOP)
    old = os.umask(0o027)
    try:
        scaffold(spec, tmp_path / "out" / "new")
        (tmp_path / "out" / "there").mkdir()
        scaffold(spec, tmp_path / "out" / "there")
    finally:
        os.umask(old)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["new", "there"]
    built, copied = modes(tmp_path / "out" / "new"), modes(tmp_path / "out" / "there")
    assert built == copied and set(built.values()) == {"0o755", "0o644"}
    assert oct((tmp_path / "out" / "new").stat().st_mode & 0o777) == "0o750"  # as mkdir would
    load_project(tmp_path / "out" / "new")


def test_force_writes_into_a_non_empty_folder(tmp_path: Path) -> None:
    project = tmp_path / "shop"
    project.mkdir()
    (project / "NOTES.md").write_text("mine\n")
    scaffold(write_spec(tmp_path, SHOP), project, force=True)
    assert (project / "NOTES.md").read_text() == "mine\n"
    load_project(project)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("where", "kind"), [("units.json", "link"), ("units", "link"),
                                              ("stub.yaml", "fifo")])
def test_force_into_a_cloned_folder_writes_nothing_through_a_planted_link_or_fifo(
    tmp_path: Path, where: str, kind: str
) -> None:
    # A folder someone else wrote (a clone) holds a link or fifo where a file will go.
    project, elsewhere = tmp_path / "shop", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    (elsewhere / "units.json").write_text("theirs\n")
    planted = project / where
    if kind == "link":
        planted.symlink_to(elsewhere / where if where != "units" else elsewhere)
    else:
        os.mkfifo(planted)
    done = run_bounded([str(DEVLOOP), "new", str(project), "--from",
                        str(write_spec(tmp_path, SHOP)), "--force"], timeout=30)
    assert done.returncode == 2, (done.stdout, done.stderr)
    reason = {"units.json": "is a symlink", "units": "passes through a symlink (units)",
              "stub.yaml": "is a fifo"}[where]
    first = done.stderr.splitlines()[0]
    assert first.startswith(f"{project}/") and f": DIR: {reason}; fix: remove it" in first
    assert sorted(p.name for p in elsewhere.iterdir()) == ["units.json"]
    assert (elsewhere / "units.json").read_text() == "theirs\n"
    assert sorted(p.name for p in project.iterdir()) == [where]  # nothing written at all


# --- one test per kind of mistake: exact line, field and fix; nothing written --------


def broken(tmp_path: Path, old: str, new: str) -> Path:
    assert SHOP.count(old) == 1
    return write_spec(tmp_path, SHOP.replace(old, new))


def test_a_kind_outside_the_list(tmp_path: Path) -> None:
    spec = broken(tmp_path, "    kind: be\n", "    kind: backend\n")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:18: units[2].kind: "backend" is not one of be, fe, db, mw, lib; fix: use one of '
        "be, fe, db, mw, lib (be: backend, fe: frontend, db: database, mw: middleware, "
        "lib: library)"
    ]


def test_an_unknown_field(tmp_path: Path) -> None:
    spec = broken(tmp_path, "    kind: db\n", "    kind: db\n    owner: ops\n")
    assert problems_of(spec, tmp_path / "out") == [
        f"{spec}:15: units[1].owner: unknown field; fix: remove `owner` or fix its spelling; "
        "allowed here: id, kind, stack, title, description, depends_on, exports, consumes, "
        "acceptance, review"
    ]


def test_a_missing_field(tmp_path: Path) -> None:
    spec = broken(tmp_path, "  - id: report\n    kind: lib\n", "  - id: report\n    title: R\n")
    assert problems_of(spec, tmp_path / "out") == [
        f"{spec}:27: units[3].kind: missing; fix: add `kind: lib` (or be, fe, db, mw)"
    ]


def test_a_value_of_the_wrong_type(tmp_path: Path) -> None:
    spec = broken(tmp_path, "depends_on: [orders]", "depends_on: orders")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:29: units[3].depends_on: expected a list, got "orders"; fix: write a YAML '
        "list: `[a, b]` or one `- item` per line"
    ]


def test_a_duplicate_id(tmp_path: Path) -> None:
    spec = broken(tmp_path, "  - id: report\n", "  - id: orders\n")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:27: units[3].id: duplicate unit id "orders" (also units[2], line 17); '
        "fix: give every unit its own id"
    ]


def test_an_unknown_dependency(tmp_path: Path) -> None:
    spec = broken(tmp_path, "depends_on: [orders]", "depends_on: [shipping]")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:29: units[3].depends_on[0]: unknown unit "shipping"; '
        'fix: add a unit with id "shipping" or remove it from depends_on'
    ]


def test_a_misspelt_dependency_gets_the_unit_it_meant(tmp_path: Path) -> None:
    spec = broken(tmp_path, "depends_on: [orders]", "depends_on: [orderz]")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:29: units[3].depends_on[0]: unknown unit "orderz"; did you mean "orders"?; '
        'fix: write "orders" (or add a unit with id "orderz")'
    ]


def test_a_misspelt_dependency_that_is_also_consumed_is_one_problem(tmp_path: Path) -> None:
    spec = broken(tmp_path, "depends_on: [stock, prices]", "depends_on: [stock, prics]")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:19: units[2].depends_on[1]: unknown unit "prics"; did you mean "prices"?; '
        'fix: write "prices" (or add a unit with id "prics")'
    ]


def test_a_misspelt_key_is_one_problem_naming_the_key_it_meant(tmp_path: Path) -> None:
    spec = broken(tmp_path, "    acceptance: [summary()", "    aceptance: [summary()")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:31: units[3].aceptance: unknown field; did you mean "acceptance"?; '
        "fix: rename `aceptance` to `acceptance`"
    ]
    top = write_spec(tmp_path, SHOP.replace("project_id: p-shop", "projectid: p-shop"))
    assert problems_of(top, tmp_path / "out") == [
        f'{top}:2: projectid: unknown field; did you mean "project_id"?; '
        "fix: rename `projectid` to `project_id`"
    ]


def test_a_consumed_unit_spelt_wrong_gets_the_dependency_it_meant(tmp_path: Path) -> None:
    spec = broken(tmp_path, "{unit: prices, module: price_of}", "{unit: price, module: price_of}")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:24: units[2].consumes[1].unit: "price" is not in depends_on; did you mean '
        '"prices"?; fix: write "prices"'
    ]


def test_a_dependency_cycle(tmp_path: Path) -> None:
    spec = broken(tmp_path, "depends_on: [stock, prices]", "depends_on: [stock, prices, report]")
    assert problems_of(spec, tmp_path / "out") == [
        f"{spec}:19: units[2].depends_on[2]: dependency cycle orders -> report -> orders; "
        "fix: remove one dependency of the cycle"
    ]


def test_consuming_a_unit_that_is_not_a_dependency(tmp_path: Path) -> None:
    spec = broken(tmp_path, "{unit: prices, module: price_of}", "{unit: report, module: x}")
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:24: units[2].consumes[1].unit: "report" is not in depends_on; '
        'fix: add "report" to depends_on or remove this entry'
    ]


def test_broken_yaml_syntax(tmp_path: Path) -> None:
    spec = broken(tmp_path, "[price_of() answers integer cents]", "[price_of() answers")
    assert problems_of(spec, tmp_path / "out") == [
        f"{spec}:17:7: (yaml): expected ',' or ']', but got ':'; "
        "fix: fix the YAML syntax at line 17, column 7 (close the bracket, or quote a value "
        "that holds `: `)"
    ]


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        # The report: PyYAML reads the key as more of `kind`'s value ("be depends_on").
        ("    depends_on: [stock, prices]\n", "      depends_on: [stock, prices]\n",
         "19: units[2].depends_on: indented 6 spaces, deeper than `kind` on line 18 (4 spaces); "
         "fix: indent `depends_on` 4 spaces, in line with `kind`"),
        ("    depends_on: [orders]\n", "      depends_on:\n        - orders\n",
         "29: units[3].depends_on: indented 6 spaces, deeper than `kind` on line 28 (4 spaces); "
         "fix: indent `depends_on` 4 spaces, in line with `kind`"),
        ("    kind: db\n", "   kind: db\n",
         "14: units[1].kind: indented 3 spaces, shallower than `id` on line 13 (4 spaces); "
         "fix: indent `kind` 4 spaces, in line with `id`"),
        ("    depends_on: [orders]\n", "  depends_on: [orders]\n",
         "29: units[3].depends_on: indented 2 spaces, shallower than `kind` on line 28 "
         "(4 spaces); fix: indent `depends_on` 4 spaces, in line with `kind`"),
        # After a block list: deeper than its items' parent, in line with nothing.
        ("    acceptance: [summary() names every order]\n",
         "    acceptance:\n      - summary() names every order\n      review: required\n",
         "33: units[3].review: indented 6 spaces, deeper than `acceptance` on line 31 (4 spaces);"
         " fix: indent `review` 4 spaces, in line with `acceptance`"),
        ("stack: python\n", "  stack: python\n",
         "3: stack: indented 2 spaces, deeper than `project_id` on line 2 (0 spaces); "
         "fix: move `stack` to the start of the line, in line with `project_id`"),
    ],
    ids=["over-indented-depends-on", "over-indented-block-list", "under-indented-key",
         "under-indented-to-the-dash", "over-indented-after-a-list", "over-indented-top-level"],
)
def test_a_misindented_key_is_named_with_the_indentation_it_needs(
    tmp_path: Path, old: str, new: str, said: str
) -> None:
    """Not PyYAML's "mapping values are not allowed here" with quoting advice: the key, how
    far it is indented, and the key it belongs in line with."""
    spec, dest = broken(tmp_path, old, new), tmp_path / "out"
    assert problems_of(spec, dest) == [f"{spec}:{said}"]
    result = CliRunner().invoke(app, ["new", str(dest), "--from", str(spec)])
    assert result.exit_code == 2 and result.stderr.splitlines() == [f"{spec}:{said}"]


def test_a_value_that_holds_a_colon_still_gets_the_quoting_advice(tmp_path: Path) -> None:
    spec = broken(tmp_path, "    kind: db\n", "    kind: db\n    title: Prices: cents\n")
    assert problems_of(spec, tmp_path / "out") == [
        f"{spec}:15:18: (yaml): mapping values are not allowed here; fix: fix the YAML syntax "
        "at line 15, column 18 (quote a value that holds `: `)"
    ]
    # A deeper line that is no key of the spec may be text of the value above: both fixes.
    text = broken(tmp_path, "    kind: db\n", "    kind: db\n    title: Prices\n      in: cents\n")
    assert problems_of(text, tmp_path / "out") == [
        f"{text}:16: units[1].in: indented 6 spaces, deeper than `title` on line 15 (4 spaces); "
        "fix: indent `in` 4 spaces, in line with `title` (or, if that line belongs to the value "
        "above, quote the value)"
    ]


def test_several_problems_are_reported_together_in_line_order(tmp_path: Path) -> None:
    text = SHOP.replace("kind: be\n", "kind: backend\n").replace("[orders]", "[ordres]")
    spec = write_spec(tmp_path, text.replace("project_id: p-shop", "project_id: p shop"))
    lines = problems_of(spec, tmp_path / "out")
    assert [line.split(": ")[0] for line in lines] == [f"{spec}:2", f"{spec}:18", f"{spec}:29"]
    assert lines[0] == (
        f'{spec}:2: project_id: "p shop" is not a valid project id; '
        'fix: letters, digits, - and _ only, e.g. "p-shop"'
    )


@pytest.mark.parametrize(
    ("old", "new", "line", "meant"),
    [
        ("  - id: report\n", "  - id: ../report\n", '27: units[3].id: "../report"', "report"),
        ("  - id: report\n", "  - id: /tmp/x\n", '27: units[3].id: "/tmp/x"', "tmp-x"),
        ("[orders]", "[../orders]", '29: units[3].depends_on[0]: "../orders"', "orders"),
    ],
    ids=["climbing-id", "absolute-id", "climbing-dependency"],
)
def test_a_unit_id_that_is_a_path_is_refused_by_devloop_new(
    tmp_path: Path, old: str, new: str, line: str, meant: str
) -> None:
    spec, dest = broken(tmp_path, old, new), tmp_path / "out"
    expected = (f"{spec}:{line} is not a valid unit id; fix: letters, digits, - and _ only, "
                f'e.g. "{meant}"')
    assert problems_of(spec, dest) == [expected]
    result = CliRunner().invoke(app, ["new", str(dest), "--from", str(spec)])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [expected]
    assert not dest.exists() and not (tmp_path / "report").exists()


def test_a_dotted_unit_id_is_one_problem_whose_fix_is_a_valid_id(tmp_path: Path) -> None:
    """`money.v2` breaks the id rule: its fix names "money-v2", and a dependency written
    that way is not offered the invalid "money.v2" as the unit it meant."""
    spec = write_spec(tmp_path, SHOP.replace("  - id: prices\n", "  - id: prices.v2\n")
                      .replace("[stock, prices]", "[stock, prices-v2]")
                      .replace("{unit: prices,", "{unit: prices-v2,"))
    assert problems_of(spec, tmp_path / "out") == [
        f'{spec}:13: units[1].id: "prices.v2" is not a valid unit id; fix: letters, digits, '
        '- and _ only, e.g. "prices-v2"'
    ]
    near = write_spec(tmp_path, SHOP.replace("  - id: prices\n", "  - id: prices.v2\n")
                      .replace("[stock, prices]", "[stock, prices-v3]"))
    lines = problems_of(near, tmp_path / "out")
    assert not any('"prices.v2"?' in line or 'write "prices.v2"' in line for line in lines)
    assert f'{near}:19: units[2].depends_on[1]: unknown unit "prices-v3"; fix: add a unit with ' \
        'id "prices-v3" or remove it from depends_on' in lines


def test_a_non_empty_folder_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    dest = tmp_path / "taken"
    dest.mkdir()
    (dest / "keep.txt").write_text("x")
    with pytest.raises(SpecInvalid) as caught:
        scaffold(write_spec(tmp_path, SHOP), dest)
    assert [str(p) for p in caught.value.problems] == [
        f"{dest}: DIR: is not empty; fix: name a new or empty folder, or pass --force to write "
        "over it"
    ]
    assert [p.name for p in dest.iterdir()] == ["keep.txt"]


def test_a_missing_spec_file(tmp_path: Path) -> None:
    assert problems_of(tmp_path / "nope.yaml", tmp_path / "out") == [
        f"{tmp_path / 'nope.yaml'}: file: not found; fix: pass the path of the project spec YAML"
    ]


def test_review_in_the_spec_reaches_units_json_for_the_project_and_a_unit(
    tmp_path: Path,
) -> None:
    spec = SHOP.replace("stack: python\n", "stack: python\nreview: required\n", 1).replace(
        "  - id: prices\n    kind: db\n", "  - id: prices\n    kind: db\n    review: none\n", 1)
    scaffold(write_spec(tmp_path, spec), tmp_path / "shop")
    project = load_project(tmp_path / "shop")
    assert project.units.review == "required"
    assert {u.id: u.review for u in project.units.units} == {
        "stock": None, "prices": "none", "orders": None, "report": None}
