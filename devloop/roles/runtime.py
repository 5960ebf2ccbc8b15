"""Run one role session end to end: view, sandbox, prompt, loop, self-check, commit, output."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from devloop.agent.checkpoint import StoreCheckpointer
from devloop.agent.flavors import toolset
from devloop.agent.reassess import make_reassess
from devloop.agent.result import SessionResult
from devloop.agent.spec import Budgets, CheckReport, SessionSpec
from devloop.agent.toolloop import RESUMABLE, AgentSession
from devloop.agent.tools import ProgressEvent, ToolContext
from devloop.agent.transcript import identity
from devloop.core.config import Settings
from devloop.core.loop import attempts_left
from devloop.core.models import HistoryEntry, UnitSpec
from devloop.ledgers import BugLedger, Timeline
from devloop.llm.base import LLMProvider
from devloop.project.stacks import StackMounts, stack_sandbox
from devloop.roles import checks, context, environment, verify
from devloop.roles.adequacy import Claims
from devloop.roles.live_output import LiveOutput
from devloop.roles.registry import all_tools
from devloop.roles.services import RoleServices
from devloop.roles.workspace import CommitOutcome, Workspace
from devloop.runners import excerpt
from devloop.runners.base import TIMEOUT_S, TestRunner
from devloop.runners.pytest import PytestRunner
from devloop.runners.vitest import VitestRunner
from devloop.store import Fence, ProjectRecord, RedisStore, UnitSource
from devloop.upstream.mount import mount_upstream
from devloop.upstream.names import import_examples

Role = Literal["coder", "tester"]
# Sessions that ended for good commit their work; a recoverable one keeps it in its
# checkpoint for the resume.
COMMITTING = ("completed", "failed", "budget_exceeded", "stuck")


@dataclass(frozen=True)
class RoleRequest:
    """One role session to run: which unit, which attempt, in which mode."""

    pid: str
    unit_id: str
    role: Role
    mode: str
    attempt: int
    run_id: str | None = None  # the tester's run (and write set)
    reflect_hint: str | None = None  # coder: the loop's hint; tester: why it tries again
    tester_try: int = 1  # the tester's try within the attempt (a session of its own)
    # The step's lease: every write of the session lands only while the step holds it.
    fence: Fence | None = None


@dataclass
class Prepared:
    """Everything built for a session before the model is called."""

    request: RoleRequest
    ws: Workspace
    ctx: ToolContext
    services: RoleServices
    stack: str
    kind: str
    mounts: StackMounts
    # Read once per session: the unit and its project as Redis held them.
    source: UnitSource
    # Where the step's time went, in ms: materialize, session, commit (fleet timings).
    timings: dict[str, int] = field(default_factory=dict)
    # The session's closing words as the model wrote them (the other role's hand-off).
    closing: str = ""

    @property
    def record(self) -> ProjectRecord:
        """The project record."""
        return self.source.record

    @property
    def spec(self) -> UnitSpec | None:
        """The unit's spec.json."""
        return self.source.spec

    @property
    def sdd_contract(self) -> dict[str, Any] | None:
        """The unit's contract as the SDD declares it."""
        return self.source.sdd_contract


@dataclass
class RoleRun:
    """What a role session left behind (the role's output payload is built from it)."""

    prepared: Prepared
    session: SessionResult | None
    commit: CommitOutcome
    history: list[HistoryEntry] = field(default_factory=list)


def session_key(company_id: str, request: RoleRequest) -> str:
    """`{role}.{company}.{pid}.{unit}`: one conversation per role and unit, kept across retries."""
    return f"{request.role}.{company_id}.{request.pid}.{request.unit_id}"


def _budget_left(store: RedisStore, settings: Settings, request: RoleRequest) -> int:
    """The attempts the retry budget allows after this one (for result.json)."""
    state = store.get_state(request.pid, request.unit_id)
    if state.attempt != request.attempt:  # a late delivery: count from the attempt alone
        return max(0, settings.retry_budget - request.attempt)
    return attempts_left(state, settings.retry_budget)


def prepare(
    store: RedisStore,
    settings: Settings,
    request: RoleRequest,
    emit: Callable[[ProgressEvent], None],
) -> Prepared:
    """Materialize the view and build the tool context and services of a session."""
    started = time.monotonic()
    source = store.unit_source(request.pid, request.unit_id, request.role)
    ws = Workspace(
        store,
        request.pid,
        request.unit_id,
        request.role,
        request.attempt,
        settings=settings,
        run_id=request.run_id,
        try_no=request.tester_try,
        fence=request.fence,
    )
    try:
        prepared = _build(store, settings, request, emit, source, ws, ws.materialize(source))
    except BaseException:
        ws.cleanup()  # the view is removed whatever went wrong
        raise
    prepared.timings["materialize_ms"] = _ms_since(started)
    return prepared


def _build(
    store: RedisStore,
    settings: Settings,
    request: RoleRequest,
    emit: Callable[[ProgressEvent], None],
    source: UnitSource,
    ws: Workspace,
    root: Path,
) -> Prepared:
    """The session's sandbox, runner, services and tool context over a materialized view."""
    record, spec = source.record, source.spec
    entry = record.units.unit(request.unit_id)
    assert entry is not None  # unit_source raised KeyError otherwise
    stack = (spec and spec.stack) or entry.stack or record.stack
    sandbox, mounts = stack_sandbox(stack, settings)
    pid, unit, role = request.pid, request.unit_id, request.role
    # What the unit's runs import of the units it depends on: their passed code.
    upstream = mount_upstream(store, settings, pid, record.units, unit, stack)
    ws.remove_with_view(upstream.close)
    # The tester's runs are the verdict; the coder's (verify_tests) are its own checks.
    ro = mounts.ro_binds[0][0]
    runner: TestRunner = (
        VitestRunner(sandbox, ro, upstream=upstream)
        if stack == "node"
        else PytestRunner(sandbox, ro, upstream=upstream)
    )
    fence = request.fence
    services = RoleServices(
        pid=pid,
        unit_id=unit,
        role=role,
        attempt=request.attempt,
        units=record.units,
        bugs=BugLedger(store.sink(pid, "bugs", fence)),
        timeline=Timeline(store.sink(pid, "timeline", fence)),
        save_state=lambda path, data: store.put_agent_state(pid, path, data, fence),
        # Kept for this unit's sessions until it passes (promote_memory), then everyone's.
        save_memory=lambda name, note: store.put_pending_note(pid, role, unit, name, note, fence),
        violations=lambda: [str(v) for v in ws.collect().violations],
        changed=lambda: sorted(ws.collect().files),
        owned=ws.owned,
        runner=runner,
        run_id=request.run_id,
        # Counted from the attempt a person or a pass last started (loop.attempts_spent).
        retry_budget_left=_budget_left(store, settings, request),
        mode=request.mode,
        live_output=lambda run_id: LiveOutput(
            store, pid, unit, run_id, cap_bytes=settings.output_cap_bytes,
            keep=settings.live_output_runs,
        ),
        claims=Claims(
            stack,
            list(spec.acceptance_criteria) if spec else [],
            context.status_codes(source.sdd_contract),
        ),
        settings=settings,
        upstream=upstream,
        stack=stack,
        kind=entry.kind,
    )
    checkpoint = source.checkpoint
    resuming = bool(
        checkpoint
        and identity(checkpoint) == (request.attempt, request.tester_try)
        and (not checkpoint["finished"] or checkpoint["result"]["status"] in RESUMABLE)
    )
    saved = store.agent_state_file(pid, services.todo_path) if resuming else None
    if saved:
        # A session resumed after its worker died (in any mode) keeps the plan it had.
        services.todo = json.loads(saved)
    if resuming:  # ... and what it said of its timeline events
        services.load_narrative(store.agent_state_file(pid, services.narrative_path))
    ctx = ToolContext(
        view=root,
        unit_id=unit,
        role=role,
        write_patterns=ws.patterns,
        sandbox=sandbox,
        ro_binds=mounts.ro_binds,
        tmpfs=mounts.tmpfs,
        # The tester's Bash has the specification's limit of one test run (60 s).
        command_timeout_s=(
            min(settings.command_timeout_s, TIMEOUT_S)
            if role == "tester"
            else settings.command_timeout_s
        ),
        emit=emit,
        services={"role": services},
        handle=ws.files,
        owned_files=ws.owned,
    )
    return Prepared(request, ws, ctx, services, stack, entry.kind, mounts, source)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def prompt_context(p: Prepared) -> dict[str, object]:
    """Every variable the role's system prompt uses: the project's own definition only
    (units.json, the SDD section, acceptance criteria, conventions), never model text."""
    r = p.request
    entry = p.record.units.unit(r.unit_id)
    assert entry is not None
    spec, contract = p.spec, p.sdd_contract
    return {
        "pid": r.pid,
        "unit_id": r.unit_id,
        "kind": p.kind,
        "stack": p.stack,
        "mode": r.mode,
        "attempt": r.attempt,
        "run_id": r.run_id or "",
        "tester_try": r.tester_try,
        "write_set": list(p.ws.patterns),
        "sdd_section": context.plain_contract(p.source.sdd_section or ""),
        "acceptance": list(spec.acceptance_criteria) if spec else [],
        "upstream": list(entry.depends_on),
        "imports": _import_examples(p, list(entry.depends_on)),
        "conventions": p.record.conventions,
        "contract_hash": entry.contract_hash,
        "status_codes": context.status_codes(contract),
        "role": r.role,
        "env_runtime": environment.runtime(p.stack, p.mounts.ro_binds[0][0]),
        "env_packages": list(environment.packages(p.stack)),
    }


def _import_examples(p: Prepared, deps: list[str]) -> dict[str, list[str]]:
    """dependency -> how code imports each module its SDD contract lists (none: http)."""
    upstream = p.services.upstream
    contracts = upstream.scope.project if upstream else {}
    found = {d: import_examples(p.stack, d, contracts.get(d)) for d in deps}
    return {d: lines for d, lines in found.items() if lines}


def first_turn_context(
    store: RedisStore, p: Prepared, history: list[HistoryEntry], regressions: list[str]
) -> dict[str, object]:
    """What prompts/first_turn.md wraps as untrusted data: memory notes, upstream
    contract.json files; for the tester the code's exports and contract.json; in a coder
    retry the failures, hints, earlier decisions and the baseline run."""
    r = p.request
    entry = p.record.units.unit(r.unit_id)
    assert entry is not None
    retry = r.mode == "retry" and r.role == "coder"
    baseline = p.services.baseline if retry else None
    return {
        "role": r.role,
        "attempt": r.attempt,
        "coder_summary": _coder_summary(store, p) if r.role == "tester" else "",
        "memory": context.memory_notes(
            store, r.pid, r.role, r.unit_id, _spec_text(p), p.record.company_id
        ),
        "upstream": context.upstream_contracts(
            store, r.pid, list(entry.depends_on), p.source.upstream
        ),
        "code_exports": (
            excerpt.code_exports(p.ctx.files, p.ctx.unit_rel) if r.role == "tester" else []
        ),
        "contract": _contract_text(p) if r.role == "tester" else "",
        "history": [h.model_dump() for h in history] if r.mode == "retry" else [],
        "regressions": regressions if r.mode == "retry" else [],
        "reflect_hint": (r.reflect_hint or "") if r.mode == "retry" else "",
        "baseline": verify.report(None, baseline) if baseline is not None else None,
    }


def _coder_summary(store: RedisStore, p: Prepared) -> str:
    """The coder's closing summary of this attempt, unless this conversation has it already
    (an earlier try of the attempt was a session that was shown it)."""
    r = p.request
    said = context.load_handoffs(store, r.pid, r.unit_id, "coder").get(r.attempt, "")
    seen = json.dumps((p.source.checkpoint or {}).get("messages", []), ensure_ascii=False)
    return "" if said and json.dumps(said, ensure_ascii=False)[1:-1] in seen else said


def _spec_text(p: Prepared) -> str:
    """What memory notes are ranked against: the unit's id, kind, SDD section, criteria."""
    spec = p.spec
    criteria = " ".join(spec.acceptance_criteria) if spec else ""
    return f"{p.request.unit_id} {p.kind} {p.stack} {p.source.sdd_section or ''} {criteria}"


def _contract_text(p: Prepared) -> str:
    """The unit's contract.json as the coder left it (capped), or empty."""
    try:
        return p.ctx.files.read_text(f"{p.ctx.unit_rel}/contract.json", cap=64 * 1024)
    except (OSError, UnicodeDecodeError):
        return ""


def first_turn(
    store: RedisStore,
    p: Prepared,
    task: str,
    history: list[HistoryEntry],
    regressions: list[str],
) -> str:
    """The first user message of an attempt: the wrapped data, then the task."""
    variables = first_turn_context(store, p, history, regressions)
    return _render("first_turn", {**variables, "task": task})


def run_session(
    store: RedisStore,
    settings: Settings,
    provider: LLMProvider,
    p: Prepared,
    task: str,
    history: list[HistoryEntry],
    regressions: list[str],
    cancel: threading.Event | None = None,
) -> SessionResult:
    """Run the model session of a prepared role with its self-check."""
    r = p.request
    # The system prompt holds the project's definition only, so it stays the same every
    # turn (one cache entry); model-written text goes in the first user turn, wrapped.
    system = _render(r.role, prompt_context(p))
    spec = SessionSpec(
        session_key=session_key(p.record.company_id, r),
        flavor=r.role,
        mode=r.mode,
        attempt=r.attempt,
        model=settings.model,
        system=system,
        max_tokens=settings.max_tokens_per_reply,
        budgets=Budgets(
            settings.session_max_turns,
            settings.session_max_tokens,
            settings.session_max_usd,
            settings.session_max_wall_s,
        ),
        try_no=r.tester_try,
        revert_to_best=r.role == "coder",
    )
    tools = all_tools()
    label = f"{r.attempt}" if r.tester_try == 1 else f"{r.attempt}.{r.tester_try}"
    reassess = make_reassess(
        spec,
        provider,
        tools,
        p.ctx,
        lambda n: StoreCheckpointer(
            store, r.pid, f"reassess.{r.role}.{label}.{n}", r.unit_id, r.fence
        ),
    )
    if r.role == "coder":

        def self_check() -> CheckReport:
            return checks.coder_checks(p.ctx, p.ws, p.stack, p.kind)
    else:
        criteria = list(p.spec.acceptance_criteria) if p.spec else []
        codes = context.status_codes(p.sdd_contract)

        def self_check() -> CheckReport:
            return checks.tester_checks(p.ctx, p.ws, p.stack, criteria, codes)

    session = AgentSession(
        spec,
        provider,
        toolset(r.role, tools),
        p.ctx,
        StoreCheckpointer(store, r.pid, r.role, r.unit_id, r.fence),
        self_check=self_check,
        workspace=p.ws,
        reassess=reassess,
        cancel=cancel,
        baseline=verify.tally(p.services.baseline) if p.services.baseline else None,
    )
    started = time.monotonic()
    p.services.runtime.update(status="running", started=time.time())
    result = session.run(first_turn(store, p, task, history, regressions))
    p.closing = session.final_plan()
    if p.closing:
        context.save_handoff(store, r.pid, r.unit_id, r.role, r.attempt, p.closing, r.fence)
    p.timings["session_ms"] = p.timings.get("session_ms", 0) + _ms_since(started)
    p.services.runtime.update(status=result.status, duration_ms=p.timings["session_ms"])
    if result.paperwork_missing:  # asked for once by name, never given: recorded as missing
        p.services.runtime["paperwork_missing"] = result.paperwork_missing
    p.services.persist_runtime()
    return result


def _render(name: str, variables: dict[str, object]) -> str:
    from devloop.agent.prompts import render

    return render(name, **variables)


def commit_if_final(p: Prepared, session: SessionResult | None) -> CommitOutcome:
    """Commit the view when the attempt is over; a recoverable session keeps its checkpoint."""
    if session is not None and session.status not in COMMITTING:
        return CommitOutcome(False, p.ws.base_version, [], [], "session not finished")
    started = time.monotonic()
    outcome = p.ws.commit()
    p.timings["commit_ms"] = _ms_since(started)
    return outcome
