"""A stub script (docs/stub-script.md) under which every unit of a project passes first time.

Two model turns per session: the coder plans, writes trivial code and contract.json,
bridges the contract, logs its decision and ticks its todolist in one turn, then says
it is done; the tester plans, writes one test per acceptance criterion and declared
status, runs them and ticks its todolist, then says it is done. The runtime's
self-checks still run for real, as do the syntax check and the tests.

A unit run again (after its spec changed, `devloop run --rerun`, `devloop unblock`)
continues the same conversations, at whatever turn they reached: each session's `repeat`
turns (docs/stub-script.md) write the code and the tests again for the spec the script was
made from, with a retry's workflow (BASELINE, VERIFY, DONE WHEN) and log, two turns an
attempt. So after a spec edit, `devloop new DIR --from spec.yaml --force` rewrites this
script with the new criteria's tests, and the next `devloop run DIR --llm stub` passes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from devloop.core.contracts import hash_contract
from devloop.core.models import UnitEntry
from devloop.project.load import Project, load_project
from devloop.scaffold.trivial_common import TrivialUnit
from devloop.scaffold.trivial_node import node_unit
from devloop.scaffold.trivial_python import python_unit

SCRIPT_FILE = "stub.yaml"
CODER_PLAN = (
    "Read spec.json and the upstream contracts",
    "Write code/",
    "Write contract.json",
    "contract_bridge",
    "Log the decision in coder.log",
)
# A retry's plan states its workflow (the self-check wants BASELINE, VERIFY, DONE WHEN).
CODER_RETRY_PLAN = (
    "BASELINE: the runtime's run of the existing tests before any edit",
    "Read spec.json and the upstream contracts",
    "Write code/ and contract.json for the spec as it is now",
    "VERIFY: verify_tests after the change",
    "DONE WHEN: every test passes and nothing that passed in the baseline fails",
    "Log the decision in coder.log",
)
TESTER_PLAN = (
    "Write one test per acceptance criterion and per declared status",
    "Run the tests",
    "Review the result",
)
REASSESS = "Re-read spec.json and make the smallest change."
HEADER = (
    "# A generated stub script (format: docs/stub-script.md): every unit passes first time.\n"
    "# Session keys are {role}.{company}.{project}.{unit}: each role's turns are written once\n"
    "# under `templates:`, filled in with the unit's files from `units:`.\n"
)


def _use(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_use": {"name": name, "input": args}}


def _plan(items: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{"id": f"step-{i:03d}", "title": t} for i, t in enumerate(items, 1)]


def _ticks(items: tuple[str, ...]) -> list[dict[str, Any]]:
    return [
        _use("update_todo_item", id=f"step-{i:03d}", status="done")
        for i in range(1, 1 + len(items))
    ]


def _turn(content: list[dict[str, Any]], latency_ms: int) -> dict[str, Any]:
    return {"latency_ms": latency_ms, "content": content} if latency_ms else {"content": content}


def unit_files(project: Project, entry: UnitEntry, entries: Mapping[str, UnitEntry]) -> TrivialUnit:
    """The trivial code and tests for one unit of the project, by its stack and kind
    (`entries`: units.json's entries by id)."""
    unit_id = entry.id
    contract = project.sdd_contracts[unit_id]
    acceptance = list(project.specs[unit_id].acceptance_criteria)
    if _stack(project, entry) == "python":
        upstream = {d: project.sdd_contracts[d] for d in entry.depends_on
                    if _stack(project, entries[d]) == "python"}
        return python_unit(unit_id, contract, acceptance, upstream)
    return node_unit(unit_id, entry.kind, contract, acceptance)


def _stack(project: Project, entry: UnitEntry) -> str:
    """Project.stack_of for an entry in hand (looking an id up scans units.json)."""
    spec = project.specs.get(entry.id)
    return (spec and spec.stack) or entry.stack or project.units.stack


def _contract(project: Project, unit_id: str) -> str:
    """The contract.json the coder writes: the SDD's, with its hash as the version."""
    sdd = project.sdd_contracts[unit_id]
    contract = {
        "unit_id": unit_id,
        "version": hash_contract(sdd),
        "exports": sdd["exports"],
        "consumes": sdd.get("consumes", []),
    }
    return json.dumps(contract, indent=2) + "\n"


# In the templates: {{unit}} is the unit the session key names; {{code}}, {{tests}} and
# {{contract}} its row of `units:` (a mapping of path -> text is written as its paths in a
# sentence, and `each` writes one block per file).
_WRITE_EACH = {"tool_use": {"name": "Write", "input": {"path": "{{key}}", "content": "{{value}}"}}}
_WRITTEN = [{"each": "code", "item": "{{key}}"}, "contract.json"]


def coder_template(latency_ms: int) -> dict[str, Any]:
    """The coder's turns: everything in one turn, then done; every later attempt (a retry
    after a spec edit, `--rerun`, `devloop unblock`) the retry's workflow, then done."""
    work = [
        {"text": "Plan, then a minimal {{unit}} that meets its contract."},
        _use("write_todolist", items=_plan(CODER_PLAN)),
        _use("Read", path="spec.json"),
        {"each": "code", "item": _WRITE_EACH},
        _use("Write", path="contract.json", content="{{contract}}"),
        _use("contract_bridge"),
        _use(
            "append_coder_log",
            decision={
                "this_fix": "First version of {{unit}}: {{code}}",
                "rationale": "The smallest code that meets the contract and the acceptance tests",
                "changed_files": _WRITTEN,
            },
        ),
        _use("timeline_append", kind="unit_coded", summary="{{unit}}: first version"),
        *_ticks(CODER_PLAN),
    ]
    done = [{"text": "Implemented {{unit}}: {{code}}, contract.json; contract_bridge ok."}]
    again = [
        {"text": "Run again: {{unit}}'s code, written for its spec as it is now."},
        _use("write_todolist", items=_plan(CODER_RETRY_PLAN)),
        _use("Read", path="spec.json"),
        {"each": "code", "item": _WRITE_EACH},
        _use("Write", path="contract.json", content="{{contract}}"),
        _use("contract_bridge"),
        _use("verify_tests"),
        _use(
            "append_coder_log",
            decision={
                "last_failure": "none recorded: the unit was asked to run again",
                "last_cause": "its definition changed, or a person asked for a run again",
                "this_fix": "{{unit}} written again for its spec: {{code}}",
                "rationale": "The trivial code meets the contract as the spec states it now",
                "changed_files": _WRITTEN,
            },
        ),
        _use("timeline_append", kind="code_patched", summary="{{unit}}: written again"),
        *_ticks(CODER_RETRY_PLAN),
    ]
    return {
        "turns": {1: _turn(work, latency_ms), 2: _turn(done, latency_ms)},
        # Past the first attempt's turns, whatever number a later attempt starts at: one
        # that starts on `done` finds the self-check unmet, gets `again`, then `done`.
        "repeat": [_turn(again, latency_ms), _turn(done, latency_ms)],
        "default": {"content": done},
    }


def tester_template(latency_ms: int) -> dict[str, Any]:
    """The tester's turns: plan, write the tests, run them and tick the plan, then done;
    every later attempt the same, with the tests for the spec the script was made from."""
    work = [
        _use("write_todolist", items=_plan(TESTER_PLAN)),
        {"each": "tests", "item": _WRITE_EACH},
        _use("run_tests"),
        _use("timeline_append", kind="unit_tested", summary="{{unit}}: tests run"),
        _use("timeline_append", kind="test_passed", summary="{{unit}}: green"),
        *_ticks(TESTER_PLAN),
    ]
    done = [{"text": "Tests for {{unit}} written and run: {{tests}}."}]
    return {
        "turns": {1: _turn(work, latency_ms), 2: _turn(done, latency_ms)},
        "repeat": [_turn(work, latency_ms), _turn(done, latency_ms)],
        "default": {"content": done},
    }


def trivial_script(project: Path | Project, latency_ms: int = 0) -> dict[str, Any]:
    """The script for every unit of the (valid) project (or the one at a path): the coder's
    and the tester's turns written once, and each unit's files in `units:`."""
    project = project if isinstance(project, Project) else load_project(project)
    prefix = f"{project.units.company_id}.{project.pid}"
    units: dict[str, Any] = {}
    entries = {entry.id: entry for entry in project.units.units}
    for entry in project.units.units:
        files = unit_files(project, entry, entries)
        units[entry.id] = {
            "code": files.code, "contract": _contract(project, entry.id), "tests": files.tests,
        }
    return {
        "templates": {
            f"coder.{prefix}.{{unit}}": coder_template(latency_ms),
            f"tester.{prefix}.{{unit}}": tester_template(latency_ms),
        },
        "sessions": {"*.reassess.*": {"default": {"content": [{"text": REASSESS}]}}},
        "default": {"content": [{"text": "Nothing more is scripted for this turn."}]},
        "units": units,
    }


# libyaml's emitter where PyYAML was built with it (the pure-Python one is ~10x slower).
_FAST_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_FAST_DUMPER):  # type: ignore[valid-type,misc]
    """Multi-line strings (code, tests) as literal blocks, so the script reads like the files."""

    def ignore_aliases(self, data: Any) -> bool:
        return True  # a shared final turn is written out twice, not as &id001 / *id001


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """Multi-line strings as literal blocks."""
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_script(script: dict[str, Any]) -> str:
    """The script as YAML text with a header comment."""
    body = yaml.dump(script, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return HEADER + body
