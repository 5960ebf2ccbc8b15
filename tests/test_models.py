"""The file models keep unknown fields and round-trip the seed's own examples."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from devloop.core.models import (
    CoderInput,
    CoderOutput,
    Contract,
    RunResult,
    TesterOutput,
    UnitsFile,
    UnitSpec,
)
from tests.growth import LINEAR, per_item_growth

SEED_RESULT = {
    "run_id": "run-20260513-1031",
    "loop": "L1",
    "unit_id": "todo-be",
    "agent": "tester",
    "attempt": 1,
    "ok": False,
    "summary": {"total": 5, "passed": 4, "failed": 1},
    "failures": [
        {
            "test": "缺 body title → 400",
            "expected": 400,
            "got": 500,
            "stack": "TypeError: ...",
            "hint": "缺 body 字段时 req.body.title 是 undefined,先做存在性判断再 .length",
            "bug_id": "bug-20260513-1031-c9f2",
        }
    ],
    "next_action": "retry_coder",
    "retry_budget_left": 4,
    "duration_ms": 1245,
}


def test_result_json_from_the_seed_round_trips() -> None:
    result = RunResult.model_validate(SEED_RESULT)
    assert result.failures[0].expected == 400
    again = result.to_json_dict()
    assert again["failures"] == SEED_RESULT["failures"]
    assert again["summary"] == {"total": 5, "passed": 4, "failed": 1, "skipped": 0}


def test_unknown_fields_written_by_other_tools_are_kept() -> None:
    data = {
        "company_id": "c",
        "project_id": "p",
        "stack": "node",
        "generated_by": "architect-7",
        "units": [
            {"id": "a", "kind": "be", "depends_on": [], "contract_hash": "sha256:0", "owner": "x"}
        ],
    }
    out = UnitsFile.model_validate(data).to_json_dict()
    assert out["generated_by"] == "architect-7"
    assert out["units"][0]["owner"] == "x"
    contract = Contract.model_validate({"unit_id": "a", "version": "v", "exports": {}, "notes": 1})
    assert json.loads(contract.model_dump_json())["notes"] == 1
    spec = UnitSpec.model_validate({"unit_id": "a", "kind": "fe", "tests": ["t1"]})
    assert spec.to_json_dict()["tests"] == ["t1"]


def test_the_file_text_is_what_json_dumps_would_write() -> None:
    units = UnitsFile.model_validate(
        {
            "company_id": "c",
            "project_id": "p",
            "stack": "node",
            "note": "données ✓",  # unknown, non-ASCII
            "weights": [0.1, 2.5, 10],
            "units": [{"id": "a", "kind": "be", "depends_on": [], "contract_hash": "sha256:0"}],
        }
    )
    # Written out by hand: two-space indent, non-ASCII kept, unknown fields kept in place,
    # json.dumps(indent=2, ensure_ascii=False)'s separators.
    assert units.to_json_text() == (
        '{\n  "company_id": "c",\n  "project_id": "p",\n  "stack": "node",\n'
        '  "units": [\n    {\n      "id": "a",\n      "kind": "be",\n'
        '      "depends_on": [],\n      "contract_hash": "sha256:0"\n    }\n  ],\n'
        '  "note": "données ✓",\n  "weights": [\n    0.1,\n    2.5,\n    10\n  ]\n}'
    )



def test_payloads_crossing_processes_are_strict() -> None:
    with pytest.raises(ValidationError):
        CoderInput.model_validate(
            {"pid": "p", "unit_id": "u", "mode": "implement", "call_id": "c", "company_id": "c",
             "surprise": True}
        )
    with pytest.raises(ValidationError):
        CoderInput.model_validate(
            {"pid": "p", "unit_id": "u", "mode": "rewrite", "call_id": "c", "company_id": "c"}
        )


def test_coder_and_tester_outputs_from_the_seed_validate() -> None:
    coder = CoderOutput.model_validate(
        {
            "ok": True, "mode": "implement", "unit_id": "todo-be", "attempt": 1,
            "files_written": ["code/server.js", "code/service.js", "contract.json", "coder.log"],
            "contract_hash": "sha256:4a7c8e2f9d1b3a5e", "contract_match_sdd": True,
            "decision": {"this_fix": "first version", "rationale": "two layers",
                         "changed_files": ["code/server.js"]},
            "sandbox_violations": [], "duration_ms": 38412, "tokens_used": 5120,
        }
    )
    assert CoderOutput.model_validate_json(coder.model_dump_json()) == coder
    tester = TesterOutput.model_validate(
        {
            "ok": True, "mode": "retry", "unit_id": "todo-be", "run_id": "run-2",
            "result_ref": "units/todo-be/runs/run-2/result.json",
            "summary": {"total": 5, "passed": 5, "failed": 0, "skipped": 0},
            "bugs_transitioned": [{"id": "bug-1", "from": "fixing", "to": "fixed"}],
            "acceptance_coverage": 1.0, "contract_coverage": 1.0, "crashed": False,
            "duration_ms": 10, "tokens_used": 0,
        }
    )
    dumped = json.loads(tester.model_dump_json(by_alias=True))
    assert dumped["bugs_transitioned"] == [{"id": "bug-1", "from": "fixing", "to": "fixed"}]
    assert TesterOutput.model_validate(dumped) == tester


def _units_file(n: int) -> UnitsFile:
    entries = [{"id": f"u{i}", "kind": "lib", "contract_hash": "sha256:0"} for i in range(n)]
    return UnitsFile(company_id="c-x", project_id="p-x", units=entries)  # type: ignore[arg-type]


def test_unit_finds_each_entry_and_none_for_an_unknown_id() -> None:
    units = _units_file(3)
    assert [units.unit(f"u{i}").id for i in range(3)] == ["u0", "u1", "u2"]  # type: ignore[union-attr]
    assert units.unit("ghost") is None
    fewer = units.model_copy(update={"units": units.units[:1]})
    assert fewer.unit("u2") is None and units.unit("u2") is not None  # each its own index
    assert units == _units_file(3)  # a built index is not part of the value


def test_looking_up_every_unit_costs_the_same_per_unit_at_any_size() -> None:
    def every(units: UnitsFile) -> None:
        for entry in units.units:
            units.unit(entry.id)

    assert per_item_growth(_units_file, every, 500, 5000) < LINEAR
