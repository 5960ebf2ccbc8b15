"""Paperwork the runtime derives, and slips that cost one turn, not the unit.

Real role sessions against the stub through the anthropic client, in the sandbox, whose
scripted models forget each bookkeeping call or make it wrong: the facts (a commit, a run
and its verdict, a todo item whose output exists, a coder.log entry's attempt, ts and
changed_files) are recorded by the runtime, once each, in the seed's formats; what only the
model can give is asked for once, by name, and a session whose only problems are such
paperwork still completes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from devloop.core.models import CoderOutput
from devloop.ledgers import BugLedger, Timeline, parse_coder_log
from devloop.roles.coder_tools import NOT_GIVEN
from devloop.store import RedisStore
from tests.roles.retry_rig import FIXED, PID, T1, T2, UNIT, Retry, retry, write
from tests.roles.test_self_checks import (
    PY_CODE,
    PY_TESTS,
    Drive,
    call,
    contract_text,
    drive,
    scripted_coder,
    scripted_tester,
    todolist,
)

__all__ = ["drive", "retry"]  # the fixtures

INVENTORY = "p-inventory"
SEED_TIMELINE_KEYS = ["ts", "kind", "unit_id", "ref", "summary", "agent"]
# One coder.log block as the seed's template writes it (the runtime's entry of facts).
FACTS_BLOCK = re.compile(
    r"---\nattempt: 1\nts: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n"
    rf"this_fix: {re.escape(NOT_GIVEN)}\nrationale: {re.escape(NOT_GIVEN)}\n"
    r'changed_files: \["code/pricing.py","contract.json"\]\n---\n\n'
)


def events(store: RedisStore, pid: str = INVENTORY) -> list[tuple[str, str | None, str | None]]:
    """(kind, ref, agent) of every timeline event of pricing, in order."""
    found = Timeline(store.sink(pid, "timeline")).events(unit_id="pricing")
    return [(e.kind, e.ref, e.agent) for e in found]


def summaries(store: RedisStore, kind: str) -> list[str]:
    return [e.summary for e in Timeline(store.sink(INVENTORY, "timeline")).events(kind=kind)]


def code_only(project: Path) -> list[dict[str, Any]]:
    """The coder's work and nothing else: no todolist, no coder.log, no timeline."""
    return [
        call("Write", path="code/pricing.py", content=PY_CODE),
        call("Write", path="contract.json", content=contract_text(project, "pricing")),
    ]


def test_a_coder_that_forgets_every_bookkeeping_call_is_asked_once_and_its_facts_recorded(
    drive: Drive, redis_store: RedisStore, inventory_project: Path, tmp_path: Path
) -> None:
    ended = drive(inventory_project, "coder", "pricing", code_only(inventory_project))
    session = ended.run.session
    assert session is not None
    # Done, reminded once of both things by name, done again: completed, nothing failed.
    assert (session.status, session.terminal_reason, session.turns) == ("completed", "end_turn", 3)
    [reminder] = ended.reminders
    assert "no todolist: call write_todolist" in reminder
    assert "coder.log has no entry for attempt 1: call append_coder_log" in reminder
    assert ended.handbacks == [] and len(session.paperwork_missing) == 2
    assert isinstance(ended.output, CoderOutput) and ended.output.ok
    # The commit is recorded once, by the runtime; coder.log has the attempt's facts.
    assert events(redis_store) == [("unit_coded", "code/pricing.py", "coder")]
    log = redis_store.unit_file(INVENTORY, "pricing", "coder.log")
    assert log is not None and FACTS_BLOCK.fullmatch(log.decode()), log
    state = redis_store.agent_state_file(INVENTORY, "coder-pricing.json")
    assert state is not None and json.loads(state)["paperwork_missing"] == session.paperwork_missing
    # Exported in the seed's formats: a timeline line's keys, a coder.log block.
    redis_store.export(INVENTORY, tmp_path / "out")
    [line] = (tmp_path / "out" / "timeline.ndjson").read_text().splitlines()
    assert list(json.loads(line)) == SEED_TIMELINE_KEYS
    exported = (tmp_path / "out" / "units/pricing/coder.log").read_text()
    assert [d.attempt for d in parse_coder_log(exported, strict=True)] == [1]


def test_a_retry_that_logs_nothing_gets_an_entry_naming_the_tests_that_failed(
    retry: Any,
) -> None:
    ended: Retry = retry([[write(FIXED)]])
    assert ended.run.session is not None and ended.run.session.status == "completed"
    assert ended.handbacks == [] and ended.output.ok
    logged = parse_coder_log(ended.store.unit_files(PID, UNIT).files["coder.log"].decode())
    assert [d.attempt for d in logged] == [1, 2]
    entry = logged[1]
    assert entry.last_failure == f"{T1}, {T2}"  # the facts the runtime has of the last run
    assert (entry.last_cause, entry.this_fix, entry.rationale) == (NOT_GIVEN,) * 3
    assert entry.changed_files == ["code/pricing.py"]
    kinds = [(e.kind, e.ref) for e in Timeline(ended.store.sink(PID, "timeline")).events()]
    assert kinds == [("code_patched", "code/pricing.py")]


def test_the_models_timeline_calls_are_narrative_on_the_one_event_of_each_fact(
    drive: Drive, redis_store: RedisStore, inventory_project: Path
) -> None:
    # The same words twice (a model repeating itself, a turn replayed) are kept once.
    said = [call("timeline_append", kind="unit_coded", summary=s)
            for s in ("first", "second", "first")]
    ended = drive(inventory_project, "coder", "pricing",
                  scripted_coder(inventory_project, extra=tuple(said), timeline="unit_coded"))
    assert ended.failures == [] and ended.reminders == [] and ended.output.ok
    assert events(redis_store) == [("unit_coded", "code/pricing.py", "coder")]
    [summary] = summaries(redis_store, "unit_coded")
    assert summary == "committed code/pricing.py, contract.json: first; second; coded"
    noted = tool_texts(ended, "timeline_append")
    assert noted and all(t.startswith("noted: the runtime records unit_coded") for t in noted)

    # The tester's two events, each with what the model said of it after the facts.
    ended = drive(inventory_project, "tester", "pricing", scripted_tester())
    assert ended.output.ok
    assert events(redis_store)[1:] == [
        ("unit_tested", "run-1-1", "tester"), ("test_passed", "run-1-1", "tester")
    ]
    assert summaries(redis_store, "test_passed") == ["3/3 passed: tested"]


def tool_texts(ended: Any, name: str) -> list[str]:
    """What the model was told of each call of a tool, in order."""
    out = []
    for request in ended.requests:
        body = request.body["messages"]
        calls = {b["id"]: b["name"] for m in body if m["role"] == "assistant"
                 for b in m["content"] if b.get("type") == "tool_use"}
        for block in body[-1]["content"] if body[-1]["role"] == "user" else []:
            if block.get("type") == "tool_result" and calls.get(block["tool_use_id"]) == name:
                out.append(str(block["content"]))
    return out


def test_a_verdict_the_model_claims_is_never_the_one_recorded(
    drive: Drive, redis_store: RedisStore, inventory_project: Path
) -> None:
    unit = inventory_project / "units" / "pricing"
    (unit / "code").mkdir()
    (unit / "code" / "pricing.py").write_text(PY_CODE)
    (unit / "contract.json").write_text(contract_text(inventory_project, "pricing"))
    red = scripted_tester(PY_TESTS.format(last=5), timeline=("unit_tested", "test_passed"))
    ended = drive(inventory_project, "tester", "pricing", red)
    assert ended.failures == [] and not ended.output.ok
    assert [k for k, _, _ in events(redis_store)] == ["unit_tested", "test_failed"]
    [claim] = [t for t in tool_texts(ended, "timeline_append") if "test_passed" in t]
    assert "Your last run's verdict is test_failed, not test_passed" in claim
    [failed] = summaries(redis_store, "test_failed")
    assert failed.startswith("2/3 passed, failing: tests/test_pricing.py::")
    assert "tested" not in failed  # its words were for a verdict the run did not give
    # The bug ledger is the run's as before: one bug_open line for the failing test.
    bugs = BugLedger(redis_store.sink(INVENTORY, "bugs")).list(unit_id="pricing")
    assert [b.status for b in bugs] == ["open"]


def test_items_whose_output_exists_are_marked_done_and_only_the_rest_asked_for(
    drive: Drive, redis_store: RedisStore, inventory_project: Path
) -> None:
    plan = call("write_todolist", items=[
        {"id": "step-001", "title": "Write code/pricing.py"},
        {"id": "step-002", "title": "Write contract.json, then contract_bridge"},
        {"id": "step-003", "title": "append_coder_log"},
        {"id": "step-004", "title": "Think about rounding"},
    ])
    calls = [plan, *scripted_coder(inventory_project, done=0)[1:]]
    ended = drive(inventory_project, "coder", "pricing", calls)
    ended.assert_asked_once_for("todolist items not done: step-004:")
    assert "step-001" not in ended.reminders[0]
    saved = redis_store.agent_state_file(INVENTORY, "coder-pricing-todo.json")
    assert saved is not None
    todo = {i["id"]: (i["status"], i.get("output_ref")) for i in json.loads(saved)}
    assert todo == {
        "step-001": ("done", "code/pricing.py"),
        "step-002": ("done", "contract.json"),
        "step-003": ("done", "append_coder_log"),
        "step-004": ("pending", None),
    }


def test_a_session_run_again_records_no_fact_twice(
    drive: Drive, redis_store: RedisStore, inventory_project: Path
) -> None:
    calls = code_only(inventory_project)
    for _ in range(2):  # a redelivery: the finished checkpoint, an unchanged unit
        drive(inventory_project, "coder", "pricing", calls)
    assert events(redis_store) == [("unit_coded", "code/pricing.py", "coder")]
    log = redis_store.unit_file(INVENTORY, "pricing", "coder.log")
    assert log is not None and len(parse_coder_log(log.decode())) == 1
    for _ in range(2):
        drive(inventory_project, "tester", "pricing",
              [todolist(1), call("Write", path="tests/test_pricing.py",
                                 content=PY_TESTS.format(last=6)), call("run_tests")])
    assert events(redis_store)[1:] == [
        ("unit_tested", "run-1-1", "tester"), ("test_passed", "run-1-1", "tester")
    ]
