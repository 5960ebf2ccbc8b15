"""`devloop validate` and `devloop contract hash`: exit codes and the exact lines users see."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devloop.cli.commands import app
from tests.plant import plant_git, plant_pyc

runner = CliRunner()


def validate(project: Path) -> tuple[int, str, str]:
    result = runner.invoke(app, ["validate", str(project)])
    return result.exit_code, result.stdout, result.stderr


def edit_units(project: Path, change) -> None:  # type: ignore[no-untyped-def]
    path = project / "units.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_example_is_valid_and_summarized(todo_project: Path) -> None:
    code, out, err = validate(todo_project)
    assert code == 0, err
    assert "units" in out and "3" in out
    assert "todo-be -> todo-app" in out
    assert err == ""


def test_malformed_json(todo_project: Path) -> None:
    (todo_project / "units.json").write_text('{"company_id": "c",\n  "units": [\n')
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        "units.json: file: invalid JSON at line 3 column 1 (Expecting value); "
        "fix: correct the JSON syntax"
    ]


def test_non_utf8_file(todo_project: Path) -> None:
    (todo_project / "units.json").write_bytes(b'{"company_id": "caf\xe9"}')
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        "units.json: file: not valid UTF-8 (byte 0xe9 at offset 19); fix: save the file as UTF-8"
    ]


def test_missing_sdd_section(todo_project: Path) -> None:
    html = todo_project / "sdd/mvcp/control.html"
    text = html.read_text()
    start = text.index('<section data-unit-id="todo-fe">')
    end = text.index("</section>", start) + len("</section>")
    html.write_text(text[:start] + text[end:])
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        'sdd/mvcp: section[data-unit-id="todo-fe"]: no section for unit "todo-fe"; '
        'fix: add <section data-unit-id="todo-fe"> to an SDD file'
    ]


def test_duplicate_unit_id(todo_project: Path) -> None:
    edit_units(todo_project, lambda d: d["units"].append(dict(d["units"][0])))
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        'units.json: units[3].id: duplicate unit id "todo-be" (also units[0]); '
        "fix: give every unit its own id"
    ]


def test_empty_project(todo_project: Path) -> None:
    edit_units(todo_project, lambda d: d.update(units=[]))
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == ["units.json: units: no units declared; fix: add at least one unit"]


def test_contract_without_exports(todo_project: Path) -> None:
    html = todo_project / "sdd/mvcp/control.html"
    text = html.read_text()
    start = text.index("<pre data-contract>", text.index('data-unit-id="todo-fe"'))
    end = text.index("</pre>", start)
    html.write_text(text[:start] + '<pre data-contract>{"consumes": []}' + text[end:])
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        'sdd/mvcp/control.html: section "todo-fe" pre[data-contract].exports: missing; '
        'fix: add an "exports" object'
    ]


def test_unknown_dependency(todo_project: Path) -> None:
    edit_units(todo_project, lambda d: d["units"][1]["depends_on"].append("profile-db"))
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        'units.json: units[1].depends_on: unknown unit "profile-db"; '
        'fix: add "profile-db" to units or remove it from depends_on'
    ]


def test_cycle_is_spelled_out(todo_project: Path) -> None:
    edit_units(todo_project, lambda d: d["units"][0]["depends_on"].append("todo-fe"))
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        "units.json: units[0].depends_on: dependency cycle todo-be -> todo-fe -> todo-be; "
        "fix: remove one dependency of the cycle"
    ]


def test_self_dependency(todo_project: Path) -> None:
    edit_units(todo_project, lambda d: d["units"][0]["depends_on"].append("todo-be"))
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        'units.json: units[0].depends_on: unit "todo-be" depends on itself; '
        'fix: remove "todo-be" from its own depends_on'
    ]


def test_contract_hash_mismatch(todo_project: Path) -> None:
    edit_units(
        todo_project, lambda d: d["units"][0].update(contract_hash="sha256:0000000000000000")
    )
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        'units.json: units[0].contract_hash: "sha256:0000000000000000" does not match the SDD '
        'contract (sha256:f72976ce98e546c7); fix: set it to "sha256:f72976ce98e546c7" or '
        "correct the contract in sdd/mvcp/control.html"
    ]


def test_field_errors_name_the_field_and_fix(todo_project: Path) -> None:
    def change(d: dict) -> None:  # type: ignore[type-arg]
        d["units"][1]["kind"] = "backend"
        del d["units"][0]["contract_hash"]

    edit_units(todo_project, change)
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        'units.json: units[0].contract_hash: field required; fix: add "contract_hash"',
        "units.json: units[1].kind: input should be 'be', 'fe', 'db', 'mw' or 'lib'; "
        "fix: use one of 'be', 'fe', 'db', 'mw' or 'lib'",
    ]


def test_missing_units_json(tmp_path: Path) -> None:
    code, _, err = validate(tmp_path)
    assert code == 2
    assert err.splitlines() == ["units.json: file: not found; fix: create units.json"]


def test_spec_json_is_derived_from_the_sdd_when_absent(todo_project: Path) -> None:
    (todo_project / "units/todo-fe/spec.json").unlink()
    code, out, _ = validate(todo_project)
    assert code == 0
    assert "derived" in out and "todo-fe" in out
    assert not (todo_project / "units/todo-fe/spec.json").exists()  # validate writes nothing


def test_bad_spec_json_is_reported(todo_project: Path) -> None:
    (todo_project / "units/todo-be/spec.json").write_text('{"unit_id": "other", "kind": "be"}')
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        'units/todo-be/spec.json: unit_id: "other" is not this unit; fix: set it to "todo-be"'
    ]


def test_contract_hash_command(tmp_path: Path, todo_project: Path) -> None:
    html = (todo_project / "sdd/mvcp/control.html").read_text()
    bare = re.search(r"<pre data-contract>(.*?)</pre>", html, re.S)
    assert bare
    sdd_json = tmp_path / "sdd.json"
    sdd_json.write_text(bare.group(1).replace("&quot;", '"'))
    full = tmp_path / "contract.json"
    exports = json.loads(sdd_json.read_text())["exports"]
    full.write_text(json.dumps({"unit_id": "todo-be", "version": "x", "exports": exports}))
    for path in (sdd_json, full):
        result = runner.invoke(app, ["contract", "hash", str(path)])
        assert result.exit_code == 0
        assert result.stdout.strip() == "sha256:f72976ce98e546c7"


def test_contract_hash_command_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text('{"unit_id": "x"}')
    result = runner.invoke(app, ["contract", "hash", str(path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == f'{path}: exports: missing; fix: add an "exports" object'


# --- the id rule: ids are names, never paths -----------------------------------------

CHARS_FIX = "fix: letters, digits, - and _ only"
LONG = "a" * 300
LONG_LINE = (
    f'"{"a" * 40}"... is not a valid unit id (300 characters); '
    "fix: at most 64 characters of letters, digits, - and _"
)


@pytest.mark.parametrize(
    ("bad", "line"),
    [
        ("../../x", f'"../../x" is not a valid unit id; {CHARS_FIX}, e.g. "x"'),
        ("a/b", f'"a/b" is not a valid unit id; {CHARS_FIX}, e.g. "a-b"'),
        ("..", f'".." is not a valid unit id; {CHARS_FIX}'),
        ("/abs/path", f'"/abs/path" is not a valid unit id; {CHARS_FIX}, e.g. "abs-path"'),
        ("a\nb", f'"a\\nb" is not a valid unit id; {CHARS_FIX}, e.g. "a-b"'),
        ("", f'"" is not a valid unit id; {CHARS_FIX}'),
        ("-x", '"-x" is not a valid unit id; fix: start it with a letter or a digit, e.g. "x"'),
        ("money.v2", f'"money.v2" is not a valid unit id; {CHARS_FIX}, e.g. "money-v2"'),
        (LONG, LONG_LINE),
    ],
    ids=["climb", "slash", "dotdot", "absolute", "newline", "empty", "dash-first", "dotted",
         "300-chars"],
)
def test_a_bad_unit_id_is_refused_with_exit_2_and_one_line(
    todo_project: Path, bad: str, line: str
) -> None:
    edit_units(todo_project, lambda d: d["units"][0].update(id=bad))
    code, out, err = validate(todo_project)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"units.json: units[0].id: {line}"]


def test_a_bad_id_in_depends_on_is_refused(todo_project: Path) -> None:
    edit_units(todo_project, lambda d: d["units"][1].update(depends_on=["../todo-be"]))
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        f'units.json: units[1].depends_on[0]: "../todo-be" is not a valid unit id; {CHARS_FIX}, '
        'e.g. "todo-be"'
    ]


def test_bad_company_and_project_ids_are_refused(todo_project: Path) -> None:
    edit_units(todo_project, lambda d: d.update(company_id="../c", project_id="p:1\n"))
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        f'units.json: company_id: "../c" is not a valid company id; {CHARS_FIX}, e.g. "c"',
        f'units.json: project_id: "p:1\\n" is not a valid project id; {CHARS_FIX}, e.g. "p-1"',
    ]


def test_a_64_character_id_is_the_longest_accepted(todo_project: Path) -> None:
    longest = "b" * 64
    edit_units(todo_project, lambda d: d.update(project_id=longest))
    assert validate(todo_project)[0] == 0
    edit_units(todo_project, lambda d: d.update(project_id=longest + "b"))
    code, _, err = validate(todo_project)
    assert code == 2 and "(65 characters)" in err


def test_a_spec_json_naming_a_bad_unit_id_is_refused(todo_project: Path) -> None:
    spec = todo_project / "units/todo-be/spec.json"
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "unit_id": "../todo-fe"}))
    code, _, err = validate(todo_project)
    assert code == 2
    assert err.splitlines() == [
        f'units/todo-be/spec.json: unit_id: "../todo-fe" is not a valid unit id; {CHARS_FIX}, '
        'e.g. "todo-fe"'
    ]


def test_the_report_goes_into_the_project_folder_unless_told_otherwise(
    todo_project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["report", str(todo_project)])
    assert done.exit_code == 0, done.output
    assert (todo_project / "report.html").is_file() and not (tmp_path / "report.html").exists()
    assert "report written to" in done.stdout and "report.html" in done.stdout


def test_artifacts_in_a_cloned_folder_are_named_as_not_imported(
    todo_project: Path, tmp_path: Path
) -> None:
    code = todo_project / "units/todo-be/code"
    plant_git(code, tmp_path / "marker")
    plant_pyc(code)
    code, out, err = validate(todo_project)
    assert code == 0, err
    assert [line for line in out.splitlines() if line.startswith("not imported")] == [
        "not imported: units/todo-be/code/.git/: version-control metadata (.git), not source "
        "(DevLoop never runs it or writes it back); metadata someone else put there can run "
        "commands when its tool (git) runs in that folder",
        "not imported: units/todo-be/code/__pycache__/: a bytecode cache (__pycache__), not "
        "source (DevLoop never runs it or writes it back)",
    ]


def test_source_a_reader_would_misread_is_refused_with_exit_2_and_one_line_each(
    todo_project: Path,
) -> None:
    code = todo_project / "units/todo-be/code"
    code.mkdir(parents=True)
    (code / "auth.js").write_text('if (role !== "admin\u202e \u2066") { deny(); }\n')
    (code / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0")
    exit_code, out, err = validate(todo_project)
    assert exit_code == 2 and out == ""
    assert err.splitlines() == [
        "units/todo-be/code/auth.js: content: holds the bidi control U+202E on line 1 (Trojan "
        "Source: it reorders what a reader sees); fix: write it as an escape (\\u202e) or "
        "remove it",
        "units/todo-be/code/logo.png: content: a binary file (10 bytes, NUL bytes among them): "
        "code/ and tests/ hold source text only; fix: remove it",
    ]
