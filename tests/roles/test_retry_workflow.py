"""A coder retry works as Lev's workflow: BASELINE before the first edit, VERIFY after, DONE
WHEN nothing that passed in the baseline fails; the reflection names the test or the cause.
Real sessions: the SDK client against the stub, real pytest in the sandbox."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devloop.ledgers import BugLedger, parse_coder_log
from devloop.roles.verify import baseline_path
from tests.roles.retry_rig import (
    BROKEN,
    FIXED,
    KEY,
    PID,
    REFLECTION,
    T1,
    T2,
    T3,
    UNIT,
    WORKFLOW,
    Retry,
    plan,
    retry,
    wrap_up,
    write,
)
from tests.roles.test_self_checks import call

__all__ = ["retry"]  # the fixture


def verify_reports(ended: Retry) -> list[dict[str, Any]]:
    """What each verify_tests call answered, parsed out of its fence."""
    calls = {
        b["id"]
        for r in ended.requests()
        for m in r.body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("type") == "tool_use" and b["name"] == "verify_tests"
    }
    out = []
    for result in ended.tool_results():
        if result["tool_use_id"] in calls:
            body = result["content"].split("\n|||\n", 1)[1].removesuffix("\n|||")
            out.append(json.loads(body))
    return out


def test_a_retry_runs_the_baseline_first_and_its_verify_runs_leave_no_trace(retry: Any) -> None:
    ended: Retry = retry([[plan(), write(FIXED), call("verify_tests")], wrap_up()])
    assert ended.run.session and ended.run.session.status == "completed", ended.handbacks
    assert ended.output.ok and ended.handbacks == []
    # The BASELINE came before the model's first turn, in its first user message.
    first = ended.requests()[0].body["messages"][0]["content"][-1]["text"]
    assert "## Baseline" in first and "2 of 4 passed" in first and T1 in first
    saved = ended.store.agent_state_file(PID, baseline_path(UNIT))
    assert saved and json.loads(saved)["attempt"] == 2
    # VERIFY compared with it.
    [report] = verify_reports(ended)
    assert report["fixed_since_baseline"] == sorted([T1, T2])
    assert report["regressed"] == [] and report["done_when_met"] is True
    assert (report["passed"], report["total"]) == (4, 4)
    # Read-only: no run dir, no result.json, no bug; the tester's run stays the verdict.
    files = ended.store.unit_files(PID, UNIT).files
    assert [p for p in files if p.startswith("runs/")] == ["runs/run-1-1/result.json"]
    assert ended.output.files_written == ["code/pricing.py", "coder.log"]
    assert BugLedger(ended.store.sink(PID, "bugs")).list(unit_id=UNIT) == []


def test_done_is_refused_while_a_test_that_passed_in_the_baseline_fails(retry: Any) -> None:
    # The first fix breaks apply_discount; the model says done without verifying.
    turns = [
        [plan(), write(BROKEN)],
        wrap_up(),
        [{"text": "Done."}],
        [write(FIXED), call("verify_tests")],
    ]
    ended: Retry = retry(turns)
    [handback] = ended.handbacks
    assert f"tests that passed in the baseline fail now: {T3}" in handback
    assert "DONE WHEN says nothing that passed in the baseline fails" in handback
    assert ended.run.session and ended.run.session.status == "completed"
    [report] = verify_reports(ended)
    assert report["regressed"] == [] and report["done_when_met"] is True
    code = ended.store.unit_files(PID, UNIT).files["code/pricing.py"].decode()
    assert code == FIXED


def test_a_retry_plan_without_baseline_verify_and_done_when_is_refused(retry: Any) -> None:
    bare = call("write_todolist", items=[{"id": "step-001", "title": "Patch line_total"}])
    ended: Retry = retry([[bare], [plan(), write(FIXED)], wrap_up()])
    refused = ended.tool_results()[0]
    assert refused["is_error"] is True
    assert "no item starts with BASELINE:, VERIFY:, DONE WHEN:" in refused["content"]
    assert "DONE WHEN: the failing tests pass and nothing that passed" in refused["content"]
    assert ended.output.ok


def test_a_reflection_that_names_no_test_and_no_cause_is_refused_with_the_template(
    retry: Any,
) -> None:
    vague = {
        "last_failure": "it failed",
        "last_cause": "a bug",
        "this_fix": "fixed the bug",
        "rationale": "it works now",
        "changed_files": ["code/pricing.py"],
    }
    ended: Retry = retry(
        [[plan(), write(FIXED), call("append_coder_log", decision=vague)], wrap_up()]
    )
    refused = next(r for r in ended.tool_results() if r["is_error"])
    text = refused["content"]
    assert text.startswith("refused: the reflection names neither the failing test")
    assert T1 in text and "this_fix does not say what changed where" in text
    assert "last_failure: <the failing test, by name>: expected <X>, got <Y>" in text
    assert "last_cause: <why, naming the code: file, function, field or call>" in text
    [entry] = [
        d
        for d in parse_coder_log(ended.store.unit_files(PID, UNIT).files["coder.log"].decode())
        if d.attempt == 2
    ]
    assert entry.last_failure == REFLECTION["last_failure"]


def test_a_reflection_naming_the_failing_test_is_enough_without_a_code_word(
    retry: Any,
) -> None:
    named = {
        **REFLECTION,
        "last_failure": "test_line_total_of_one_is_the_price got 251",
        "last_cause": "wrong arithmetic",
    }
    ended: Retry = retry(
        [[plan(), write(FIXED), call("append_coder_log", decision=named)], wrap_up()]
    )
    logged = [r for r in ended.tool_results() if "coder.log: decision" in str(r["content"])]
    assert logged and not logged[0]["is_error"]
    assert ended.output.ok


def test_the_retry_history_and_baseline_reach_the_model_once_fenced(retry: Any) -> None:
    ended: Retry = retry([[plan(), write(FIXED), call("verify_tests")], wrap_up()])
    system = ended.requests()[0].body["system"][0]["text"]
    assert T1 not in system and "BASELINE: ..." in system
    assert [i["title"] for i in WORKFLOW][2].startswith("DONE WHEN")
    assert KEY.endswith(UNIT)


@pytest.mark.parametrize(("rewrite", "runs"), [(False, 2), (True, 3)])
def test_done_reuses_the_last_verify_run_unless_code_changed_since(
    retry: Any, rewrite: bool, runs: int
) -> None:
    # Every test run of the session is counted by its services: the baseline is the first,
    # verify_tests the second; "done" runs them again only if code/ changed since.
    after = [write(FIXED)] if rewrite else []
    ended: Retry = retry([[plan(), write(FIXED), call("verify_tests")], [*after, *wrap_up()]])
    assert ended.output.ok and ended.handbacks == []
    assert ended.run.prepared.services.verify_runs == runs
