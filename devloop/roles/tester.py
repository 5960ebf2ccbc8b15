"""The tester role: write and run tests (or just re-run them), then report a TesterOutput."""

from __future__ import annotations

import threading
from collections.abc import Callable

from devloop.agent.result import SessionResult
from devloop.agent.tools import ProgressEvent
from devloop.config import Settings
from devloop.llm.base import LLMProvider
from devloop.models import BugMove, RunResult, RunSummary, TesterOutput
from devloop.roles import checks, context
from devloop.roles.runtime import (
    Prepared,
    RoleRequest,
    RoleRun,
    commit_if_final,
    prepare,
    run_session,
)
from devloop.roles.testrun import run_and_record
from devloop.store import RedisStore


def tester_task(request: RoleRequest, crash: str | None = None) -> str:
    """The user message that starts (or continues) the tester's conversation."""
    if crash:
        return (
            f"Run {request.run_id}: re-running the existing tests crashed: {crash}\n"
            "If the tests no longer load, rewrite them; if the code does not load, say so "
            "in a failure with a hint for the coder. Then run_tests again."
        )
    if request.mode == "resume":
        return "Your session was interrupted. Check what is already in tests/, then finish."
    return (
        f"Test unit {request.unit_id} (attempt {request.attempt}, run {request.run_id}). "
        "Follow the workflow in your instructions and finish when the self-check holds."
    )


def rerun(p: Prepared) -> RunResult:
    """Re-run the existing tests with no model at all: the zero-token retry."""
    s = p.services
    result = run_and_record(s, p.ctx.view)
    verdict = "test_passed" if result.ok else "test_starved" if result.starved else "test_failed"
    for kind in ("unit_tested", verdict):
        s.timeline.append(
            kind,
            unit_id=s.unit_id,
            ref=s.run_id,
            agent="tester",
            summary=f"re-run of existing tests: {result.summary.passed}/"
            f"{result.summary.total} passed",
        )
    return result


def run_tester(
    store: RedisStore,
    settings: Settings,
    provider: LLMProvider,
    request: RoleRequest,
    emit: Callable[[ProgressEvent], None] = lambda e: None,
    cancel: threading.Event | None = None,
) -> tuple[RoleRun, TesterOutput]:
    """Run the tester for one attempt: a plain re-run in retry mode, else a model session."""
    p = prepare(store, settings, request, emit)
    session: SessionResult | None = None
    try:
        has_tests = bool(checks.test_sources(p.ctx.unit_dir))
        crash = None
        if request.mode == "retry" and has_tests:
            result = rerun(p)
            crash = result.crash_reason if result.crashed else None
        if crash or request.mode != "retry" or not has_tests:
            session = run_session(
                store, settings, provider, p, tester_task(request, crash), [], [], cancel
            )
        spec = p.spec
        acceptance = len(spec.acceptance_criteria) if spec else 0
        codes = context.status_codes(p.sdd_contract)
        _, acc_cov, contract_cov = checks.coverage(
            checks.test_sources(p.ctx.unit_dir), p.stack, acceptance, codes
        )
        commit = commit_if_final(p, session)
    finally:
        p.ws.cleanup()
    return RoleRun(p, session, commit), _output(p, session, acc_cov, contract_cov)


def _output(
    p: Prepared, session: SessionResult | None, acc_cov: float, contract_cov: float
) -> TesterOutput:
    s, r = p.services, p.request
    last = s.last_run or {}
    result = RunResult.model_validate(last["result"]) if last else None
    tokens = session.usage.prompt_tokens + session.usage.output_tokens if session else 0
    return TesterOutput(
        ok=bool(result and result.ok and (session is None or session.status == "completed")),
        mode=r.mode,
        unit_id=r.unit_id,
        run_id=r.run_id or "",
        result_ref=f"units/{r.unit_id}/runs/{r.run_id}/result.json",
        summary=result.summary if result else RunSummary(),
        failures=result.failures if result else [],
        bugs_opened=list(last.get("bugs_opened", [])),
        bugs_transitioned=[BugMove.model_validate(m) for m in last.get("bugs_transitioned", [])],
        acceptance_coverage=round(acc_cov, 3),
        contract_coverage=round(contract_cov, 3),
        crashed=bool(result.crashed) if result else True,
        starved=bool(result and result.starved),
        duration_ms=(session.duration_ms if session else 0) + (result.duration_ms if result else 0),
        tokens_used=tokens,
    )
