"""The coder role: implement or retry a unit, then report a CoderOutput."""

from __future__ import annotations

import threading
from collections.abc import Callable

from devloop.agent.tools import ProgressEvent
from devloop.core.config import Settings
from devloop.core.contracts import contract_bridge, hash_contract
from devloop.core.models import CoderOutput, DecisionSummary, HistoryEntry, RunResult
from devloop.llm.base import LLMProvider
from devloop.roles import context, derive, verify
from devloop.roles.coder_tools import log_facts, read_contract
from devloop.roles.runtime import (
    COMMITTING,
    Prepared,
    RoleRequest,
    RoleRun,
    commit_if_final,
    prepare,
    run_session,
)
from devloop.store import RedisStore


def coder_task(request: RoleRequest, history: list[HistoryEntry]) -> str:
    """The task words that end the first user message of an attempt (runtime.first_turn
    puts the failures, hints and decisions before them, wrapped as untrusted data)."""
    if request.mode == "implement":
        return (
            f"Implement unit {request.unit_id} (attempt {request.attempt}). Follow the "
            "workflow in your instructions and finish when the self-check holds."
        )
    if request.mode == "resume":
        return "Your session was interrupted. Check what is already written, then finish."
    where = "; what it found, with its hints, is in the retry history above" if history else ""
    return (
        f"Attempt {request.attempt}: the tester's run of attempt {request.attempt - 1} was "
        f"red{where}. Reflect first (last time test X failed because Y; this time Z), state "
        "BASELINE, VERIFY and DONE WHEN in your todolist, make the smallest fix, run "
        "verify_tests, log it with append_coder_log, and finish when the self-check holds."
    )


def run_coder(
    store: RedisStore,
    settings: Settings,
    provider: LLMProvider,
    request: RoleRequest,
    emit: Callable[[ProgressEvent], None] = lambda e: None,
    cancel: threading.Event | None = None,
) -> tuple[RoleRun, CoderOutput]:
    """Run the coder session for one attempt and commit what it wrote."""
    p = prepare(store, settings, request, emit)
    try:
        history: list[HistoryEntry] = []
        regressions: list[str] = []
        if request.mode == "retry":
            files = store.unit_files(request.pid, request.unit_id).files
            notes = context.review_notes(store, request.pid, request.unit_id)
            said = context.load_handoffs(store, request.pid, request.unit_id, "tester")
            history, regressions = context.retry_history(files, request.attempt, notes, said)
            p.services.baseline = capture_baseline(store, p)
            named = [str(f.get("test")) for f in history[-1].tester_said] if history else []
            seen = [f.test for f in p.services.baseline.failures] if p.services.baseline else []
            p.services.failing_tests = list(dict.fromkeys([*named, *seen]))
        session = run_session(
            store, settings, provider, p, coder_task(request, history), history, regressions, cancel
        )
        if session.status in COMMITTING:
            # coder.log keeps one entry per attempt: its facts, when the coder logged none.
            log_facts(p.ctx)
        contract = read_contract(p.ctx)
        bridge = contract_bridge(p.services.units, request.unit_id, contract)
        logged = context.decisions({"coder.log": _coder_log(p)})
        mine = [d for d in logged if d.attempt == request.attempt]
        commit = commit_if_final(p, session)
        # The commit of code is a fact: the runtime's timeline event, once.
        derive.record_commit(p.services, commit.committed, p.ctx.emit)
    finally:
        p.ws.cleanup()
    decision = mine[-1] if mine else None
    output = CoderOutput(
        ok=session.status == "completed" and bridge.ok and not commit.violations,
        mode=request.mode,
        unit_id=request.unit_id,
        attempt=request.attempt,
        files_written=commit.committed,
        contract_hash=_hash(contract),
        contract_match_sdd=bridge.ok,
        decision=DecisionSummary(
            last_failure=decision.last_failure if decision else None,
            this_fix=decision.this_fix if decision else "(no coder.log entry)",
            rationale=decision.rationale if decision else "",
            changed_files=decision.changed_files if decision else [],
        ),
        sandbox_violations=[str(v) for v in commit.violations],
        duration_ms=session.duration_ms,
        tokens_used=session.usage.prompt_tokens + session.usage.output_tokens,
    )
    return RoleRun(p, session, commit, history), output


def capture_baseline(store: RedisStore, p: Prepared) -> RunResult | None:
    """BASELINE: the existing tests against the code as the last attempt left it, run
    before the session's first edit (a resumed attempt keeps the run it made first)."""
    r = p.request
    path = verify.baseline_path(r.unit_id)
    found = verify.load_baseline(store.agent_state_file(r.pid, path), r.attempt)
    if found is None:
        found = verify.run_existing_tests(p.ctx)
        if found is not None:
            store.put_agent_state(r.pid, path, verify.dump_baseline(found, r.attempt))
    return found


def _coder_log(p: Prepared) -> bytes:
    """coder.log as append_coder_log wrote it (what is committed), never the view's file."""
    record = p.ws.owned.get("coder.log")
    return (record.data if record else None) or b""


def _hash(contract: dict[str, object] | None) -> str:
    try:
        return hash_contract(contract) if contract else ""
    except ValueError:
        return ""
