"""The tester role: write and run tests (or just re-run them), then report a TesterOutput."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from pathlib import Path

from devloop.agent.result import SessionResult
from devloop.agent.tools import ProgressEvent
from devloop.agent.untrusted import wrap_untrusted
from devloop.core.config import Settings
from devloop.core.models import BugMove, RunResult, RunSummary, TesterOutput
from devloop.llm.base import LLMProvider
from devloop.roles import adequacy, checks, context, coverage, derive
from devloop.roles.runtime import (
    COMMITTING,
    Prepared,
    RoleRequest,
    RoleRun,
    commit_if_final,
    prepare,
    run_session,
)
from devloop.roles.testrun import run_and_record
from devloop.runners.tamper import is_code_fault
from devloop.store import RedisStore


def tester_task(
    request: RoleRequest, crash: str | None = None, problems: list[str] | None = None
) -> str:
    """The user message that starts (or continues) the tester's conversation."""
    if crash:
        # The crash reason quotes the code under test: data, fenced like any other.
        return (
            f"Run {request.run_id}: re-running the existing tests crashed.\n"
            f"{wrap_untrusted('why the re-run crashed (output of the tests)', crash)}\n"
            "If the tests no longer load, rewrite them; if the code does not load, say so "
            "in a failure with a hint for the coder. Then run_tests again."
        )
    if problems:
        return (
            f"Run {request.run_id}: the existing tests cannot be re-run as they are:\n"
            + "\n".join(f"- {p}" for p in problems)
            + "\nFix the tests, run_tests, and finish when the self-check holds."
        )
    if request.tester_try > 1:
        # The code is the one the last try ran on: only the tests or their run can change.
        return (
            f"Attempt {request.attempt}, try {request.tester_try} (run {request.run_id}): your "
            f"last try did not stand: {request.reflect_hint or 'it ended early'}\n"
            "The coder has not changed the code since. Fix what it says in your tests, "
            "run_tests again, and finish when the self-check holds."
        )
    if request.mode == "resume":
        return "Your session was interrupted. Check what is already in tests/, then finish."
    return (
        f"Test unit {request.unit_id} (attempt {request.attempt}, run {request.run_id}). "
        "Follow the workflow in your instructions and finish when the self-check holds."
    )


def tests_digest(unit_dir: Path) -> str:
    """sha256 over every file under tests/ (path and text), to see whether they changed."""
    sources = checks.test_sources(unit_dir)
    canonical = json.dumps(sorted(sources.items()), ensure_ascii=False).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def checked_path(unit_id: str) -> str:
    """agent-state/ file with the digest of the tests the tester's last checked session left."""
    return f"tester-{unit_id}-tests.json"


def rerun_problems(store: RedisStore, p: Prepared) -> list[str]:
    """Why the existing tests may not be re-run without the model (empty: they may).

    The static self-checks must hold, and the tests must be the ones a tester session
    whose self-check passed left behind (not a failed session's, nor anyone else's).
    """
    criteria = list(p.spec.acceptance_criteria) if p.spec else []
    codes = context.status_codes(p.sdd_contract)
    problems = checks.static_test_problems(p.ctx.unit_dir, p.stack, criteria, codes)
    saved = store.agent_state_file(p.request.pid, checked_path(p.request.unit_id))
    expected = json.loads(saved).get("digest") if saved else None
    if expected is None:
        problems.append("no tester session has checked these tests yet")
    elif expected != tests_digest(p.ctx.unit_dir):
        problems.append("tests/ changed since the last tester session whose self-check passed")
    return problems


def _after_starved(store: RedisStore, request: RoleRequest) -> bool:
    """Whether this try re-runs a run the machine starved (the tests are not in question)."""
    previous = f"runs/run-{request.attempt}-{request.tester_try - 1}/result.json"
    raw = store.unit_file(request.pid, request.unit_id, previous)
    return raw is not None and RunResult.model_validate_json(raw).starved


def _remember_checked(store: RedisStore, p: Prepared) -> None:
    """The session passed its self-check: its tests are the ones a re-run may trust."""
    record = {
        "digest": tests_digest(p.ctx.unit_dir),
        "attempt": p.request.attempt,
        "run_id": p.request.run_id,
    }
    store.put_agent_state(
        p.request.pid, checked_path(p.request.unit_id), json.dumps(record).encode()
    )


def rerun(p: Prepared) -> RunResult:
    """Re-run the existing tests with no model at all: the zero-token retry (its timeline
    events are the runtime's, as every run's: derive.record_run after the commit)."""
    result = run_and_record(p.services, p.ctx.view)
    assert p.services.last_run is not None
    p.services.last_run["rerun"] = True
    return result


def _reuse_last_run(store: RedisStore, p: Prepared) -> str | None:
    """A session that had already finished ran nothing now (a second `session run` on an
    unchanged folder): report its attempt's last recorded run instead of no run at all
    (which reads as a crash). The run id it reuses, or None when there is none."""
    prefix = f"runs/run-{p.request.attempt}-"
    tries = []
    for path in store.unit_files(p.request.pid, p.request.unit_id).files:
        middle = path.removeprefix(prefix).removesuffix("/result.json")
        if path.startswith(prefix) and path.endswith("/result.json") and middle.isdigit():
            tries.append(int(middle))
    if not tries:
        return None
    run_id = f"run-{p.request.attempt}-{max(tries)}"
    raw = store.unit_file(p.request.pid, p.request.unit_id, f"runs/{run_id}/result.json")
    if raw is None:
        return None
    result = RunResult.model_validate_json(raw)
    p.services.last_run = {"result": result.to_json_dict(), "bugs_opened": [],
                           "bugs_transitioned": []}
    return run_id


def run_tester(
    store: RedisStore,
    settings: Settings,
    provider: LLMProvider,
    request: RoleRequest,
    emit: Callable[[ProgressEvent], None] = lambda e: None,
    cancel: threading.Event | None = None,
) -> tuple[RoleRun, TesterOutput]:
    """Run the tester for one attempt: in retry mode a plain re-run when the tests pass the
    static checks and are the last checked session's, else (or when it crashes) a session."""
    p = prepare(store, settings, request, emit)
    session: SessionResult | None = None
    rerun_from: int | None = None  # the attempt whose checked tests a re-run ran
    try:
        task = tester_task(request)
        zero_token = request.mode == "retry" and (
            request.tester_try == 1 or _after_starved(store, request)
        )
        if zero_token and checks.test_sources(p.ctx.unit_dir):
            problems = rerun_problems(store, p)
            if problems:
                task = tester_task(request, problems=problems)
            else:
                result = rerun(p)
                rerun_from = _checked_attempt(store, p)
                weak = adequacy.problems(result.adequacy)
                # A crash the code caused (it tampers with the framework) is the coder's.
                crash = result.crashed and not is_code_fault(result.crash_reason)
                task = (
                    tester_task(request, crash=result.crash_reason)
                    if crash
                    else tester_task(request, problems=weak)
                    if weak
                    else ""
                )
        if task:
            session = run_session(store, settings, provider, p, task, [], [], cancel)
            if session.status == "completed":
                _remember_checked(store, p)
        criteria = list(p.spec.acceptance_criteria) if p.spec else []
        codes = context.status_codes(p.sdd_contract)
        _, acc_cov, contract_cov = coverage.coverage(
            checks.test_sources(p.ctx.unit_dir), p.stack, criteria, codes
        )
        commit = commit_if_final(p, session)
        last = p.services.last_run
        if last is not None and (session is None or session.status in COMMITTING):
            # The run that stands and its verdict are facts: the runtime's events, once.
            derive.record_run(p.services, commit.committed, p.ctx.emit,
                              rerun=bool(last.get("rerun")))
        reused = _reuse_last_run(store, p) if last is None else None
    finally:
        p.ws.cleanup()
    output = _output(p, session, acc_cov, contract_cov)
    if reused is not None:
        output.run_id, output.reused_run = reused, reused
        output.tokens_used = 0  # the finished session's tokens were spent, and counted, before
        output.result_ref = f"units/{request.unit_id}/runs/{reused}/result.json"
    if session is None and rerun_from is not None:
        output.rerun, output.tests_from_attempt = True, rerun_from
    output.sandbox_violations = [str(v) for v in commit.violations]
    return RoleRun(p, session, commit), output


def _checked_attempt(store: RedisStore, p: Prepared) -> int | None:
    """The attempt of the tester session whose checked tests a re-run runs."""
    saved = store.agent_state_file(p.request.pid, checked_path(p.request.unit_id))
    try:
        return int(json.loads(saved)["attempt"]) if saved else None
    except (ValueError, KeyError, TypeError):
        return None


def _output(
    p: Prepared, session: SessionResult | None, acc_cov: float, contract_cov: float
) -> TesterOutput:
    s, r = p.services, p.request
    last = s.last_run or {}
    result = RunResult.model_validate(last["result"]) if last else None
    tokens = session.usage.prompt_tokens + session.usage.output_tokens if session else 0
    proof = result.adequacy if result else None
    if proof is not None and proof.measured and proof.criteria_proven is not None:
        acc_cov = proof.criteria_proven  # exercised is not enough: proven by tests that can fail
    proven = not adequacy.problems(proof)
    return TesterOutput(
        ok=bool(
            result
            and result.ok
            and proven
            and (session is None or session.status == "completed")
        ),
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
        coverage=result.coverage if result else None,
        duration_ms=(session.duration_ms if session else 0) + (result.duration_ms if result else 0),
        tokens_used=tokens,
    )
