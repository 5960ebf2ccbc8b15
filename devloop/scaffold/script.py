"""A stub script (docs/stub-script.md) under which every unit of a project passes first time.

Two model turns per session: the coder plans, writes trivial code and contract.json,
bridges the contract, logs its decision and ticks its todolist in one turn, then says
it is done; the tester plans, writes one test per acceptance criterion and declared
status, runs them and ticks its todolist, then says it is done. The runtime's
self-checks still run for real, as do the syntax check and the tests.

A unit run again (`devloop run --rerun`, or after its spec changed) continues the same
conversations: later attempts re-plan, re-check and log (the coder) or re-run the tests
(the tester) on the files the first attempt wrote, two turns each.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from devloop.contracts import hash_contract
from devloop.project import Project, load_project
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
TESTER_PLAN = (
    "Write one test per acceptance criterion and per declared status",
    "Run the tests",
    "Review the result",
)
ATTEMPTS = 5  # the loop's retry budget: every attempt a unit can get is scripted
HEADER = (
    "# A generated stub script (format: docs/stub-script.md): every unit passes first time.\n"
    "# Session keys are {role}.{company}.{project}.{unit}.\n"
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


def unit_files(project: Project, unit_id: str) -> TrivialUnit:
    """The trivial code and tests for one unit of the project, by its stack and kind."""
    contract = project.sdd_contracts[unit_id]
    acceptance = list(project.specs[unit_id].acceptance_criteria)
    entry = project.units.unit(unit_id)
    assert entry is not None
    if project.stack_of(unit_id) == "python":
        upstream = {d: project.sdd_contracts[d] for d in entry.depends_on
                    if project.stack_of(d) == "python"}
        return python_unit(unit_id, contract, acceptance, upstream)
    return node_unit(unit_id, entry.kind, contract, acceptance)


def coder_session(project: Project, unit_id: str, files: TrivialUnit, latency_ms: int) -> Any:
    """The coder's turns: everything in one turn, then done."""
    sdd = project.sdd_contracts[unit_id]
    contract = {
        "unit_id": unit_id,
        "version": hash_contract(sdd),
        "exports": sdd["exports"],
        "consumes": sdd.get("consumes", []),
    }
    written = [*files.code, "contract.json"]
    work = [
        {"text": f"Plan, then a minimal {unit_id} that meets its contract."},
        _use("write_todolist", items=_plan(CODER_PLAN)),
        _use("Read", path="spec.json"),
        *(_use("Write", path=p, content=c) for p, c in files.code.items()),
        _use("Write", path="contract.json", content=json.dumps(contract, indent=2) + "\n"),
        _use("contract_bridge"),
        _use(
            "append_coder_log",
            decision={
                "this_fix": f"First version of {unit_id}: {', '.join(files.code)}",
                "rationale": "The smallest code that meets the contract and the acceptance tests",
                "changed_files": written,
            },
        ),
        _use("timeline_append", kind="unit_coded", summary=f"{unit_id}: first version"),
        *_ticks(CODER_PLAN),
    ]
    done = [{"text": f"Implemented {unit_id}: {', '.join(written)}; contract_bridge ok."}]
    turns = {1: _turn(work, latency_ms), 2: _turn(done, latency_ms)}
    for attempt in range(2, ATTEMPTS + 1):
        again = [
            {"text": f"Attempt {attempt}: re-read the spec; the code stands as written."},
            _use("write_todolist", items=_plan(CODER_PLAN)),
            _use("Read", path="spec.json"),
            _use("contract_bridge"),
            _use(
                "append_coder_log",
                decision={
                    "last_failure": "none recorded: the unit was asked to run again",
                    "last_cause": "its definition changed or a person asked for a re-run",
                    "this_fix": f"Attempt {attempt} of {unit_id}: the code checked, unchanged",
                    "rationale": "The trivial code still meets the contract",
                    "changed_files": list(files.code),  # checked; the log wants the files
                },
            ),
            *_ticks(CODER_PLAN),
        ]
        turns[2 * attempt - 1] = _turn(again, latency_ms)
        turns[2 * attempt] = _turn(done, latency_ms)
    return {"turns": turns, "default": {"content": done}}


def tester_session(unit_id: str, files: TrivialUnit, latency_ms: int) -> Any:
    """The tester's turns: plan, write the tests, run them and tick the plan, then done."""
    work = [
        _use("write_todolist", items=_plan(TESTER_PLAN)),
        *(_use("Write", path=p, content=c) for p, c in files.tests.items()),
        _use("run_tests"),
        _use("timeline_append", kind="unit_tested", summary=f"{unit_id}: tests run"),
        _use("timeline_append", kind="test_passed", summary=f"{unit_id}: green"),
        *_ticks(TESTER_PLAN),
    ]
    done = [{"text": f"Tests for {unit_id} written and run: {', '.join(files.tests)}."}]
    again = [_use("write_todolist", items=_plan(TESTER_PLAN)), _use("run_tests"),
             *_ticks(TESTER_PLAN)]
    turns = {1: _turn(work, latency_ms), 2: _turn(done, latency_ms)}
    for attempt in range(2, ATTEMPTS + 1):
        turns[2 * attempt - 1] = _turn(again, latency_ms)
        turns[2 * attempt] = _turn(done, latency_ms)
    return {"turns": turns, "default": {"content": done}}


def trivial_script(project_dir: Path, latency_ms: int = 0) -> dict[str, Any]:
    """The script for every unit of the (valid) project at project_dir."""
    project = load_project(project_dir)
    prefix = f"{project.units.company_id}.{project.pid}"
    sessions: dict[str, Any] = {}
    for entry in project.units.units:
        files = unit_files(project, entry.id)
        sessions[f"coder.{prefix}.{entry.id}"] = coder_session(project, entry.id, files, latency_ms)
        sessions[f"tester.{prefix}.{entry.id}"] = tester_session(entry.id, files, latency_ms)
    sessions["*.reassess.*"] = {
        "default": {"content": [{"text": "Re-read spec.json and make the smallest change."}]}
    }
    return {
        "sessions": sessions,
        "default": {"content": [{"text": "Nothing more is scripted for this turn."}]},
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (code, tests) as literal blocks, so the script reads like the files."""

    def ignore_aliases(self, data: Any) -> bool:
        return True  # a shared final turn is written out twice, not as &id001 / *id001


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_script(script: dict[str, Any]) -> str:
    """The script as YAML text with a header comment."""
    body = yaml.dump(script, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return HEADER + body
