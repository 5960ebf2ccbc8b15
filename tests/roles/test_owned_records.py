"""Records only their owners write: the runner's run files, the coder's coder.log, the ledgers.

Real role sessions against the stub, in the real sandbox (and once without one, to show
the workspace catches what the sandbox would have stopped): a tester that forges its red
result.json, a coder that rewrites coder.log, either reaching for bugs, timeline and
agent-state. What is committed (and exported) is always the owning tool's copy.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devloop.core.config import Settings
from devloop.core.models import RunResult
from devloop.ledgers import BugLedger, Timeline, append_decision, parse_coder_log
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles.coder import run_coder
from devloop.roles.coder_tools import NOT_GIVEN
from devloop.roles.runtime import RoleRequest
from devloop.roles.tester import run_tester
from devloop.store import RedisStore
from tests.roles.test_self_checks import (
    DONE,
    PY_CODE,
    PY_TESTS,
    RED,
    Ended,
    call,
    contract_text,
    handbacks,
    reminders,
    scripted_coder,
    scripted_tester,
)

RESULT = "runs/run-1-1/result.json"
FORGED = '{"ok": true, "summary": {"total": 3, "passed": 3, "failed": 0}, "failures": []}'
OWNED = "changes to files only their tools write: "
Go = Callable[..., Ended]


@pytest.fixture
def session(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path
) -> Iterator[Go]:
    """Import a project, script one session of a role on pricing, run it to its end;
    `sandbox="none"` runs its commands unsandboxed (what a sandbox escape could do)."""
    stubs: list[StubServer] = []

    def go(project: Path, role: str, calls: list[dict[str, Any]], *, sandbox: str = "bwrap",
           mode: str | None = None, attempt: int = 1) -> Ended:
        loaded = load_project(project)
        redis_store.import_project(loaded)
        turns = {1: {"content": calls}}
        stub = StubServer({"sessions": {f"{role}.*.pricing": {"turns": turns, "default": DONE}}},
                          record_bodies=True)
        stubs.append(stub.start())
        llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
        chosen = settings.model_copy(update={"sandbox": sandbox})
        if role == "coder":
            request = RoleRequest(loaded.pid, "pricing", "coder", mode or "implement", attempt)
            run, out = run_coder(redis_store, chosen, llm, request)
        else:
            request = RoleRequest(loaded.pid, "pricing", "tester", "test", 1, "run-1-1")
            run, out = run_tester(redis_store, chosen, llm, request)
        return Ended(run, out, handbacks(stub), reminders(stub), list(stub.requests))

    yield go
    for stub in stubs:
        stub.stop()


def committed(store: RedisStore, rel: str) -> bytes | None:
    """A unit file of pricing as the store holds it (what export writes)."""
    return store.unit_file("p-inventory", "pricing", rel)


# --- the tester's run files ----------------------------------------------------------


@pytest.fixture
def coded(inventory_project: Path) -> Path:
    """The inventory project with pricing coded: the tester's starting point."""
    unit = inventory_project / "units" / "pricing"
    (unit / "code").mkdir()
    (unit / "code" / "pricing.py").write_text(PY_CODE)
    (unit / "contract.json").write_text(contract_text(inventory_project, "pricing"))
    return inventory_project


def red_run_then(*forge: dict[str, Any]) -> list[dict[str, Any]]:
    """A red run_tests, then the forging calls, then the rest of a red run's workflow."""
    return scripted_tester(PY_TESTS.format(last=5), after_run=forge, timeline=RED)


def assert_red_committed(store: RedisStore, ended: Ended) -> None:
    """The committed result.json is the runner's red one, and so is the tester's output."""
    raw = committed(store, RESULT)
    assert raw is not None
    result = RunResult.model_validate_json(raw)
    assert not result.ok and result.summary.failed == 1 and result.failures[0].bug_id
    assert not ended.output.ok and ended.output.summary.failed == 1
    assert b'"ok": true' not in raw


@pytest.mark.parametrize(
    ("forge", "refusal"),
    [
        (call("Write", path=RESULT, content=FORGED),
         f"denied: {RESULT} is written only by run_tests: improve a hint with set_hint"),
        # The tester has no Edit at all: the call is refused before any tool runs.
        (call("Edit", path=RESULT, old='"ok": false', new='"ok": true'),
         "denied: tool 'Edit' is not available to the tester role"),
        (call("Bash", command=f"echo '{FORGED}' > {RESULT}"), "Read-only file system"),
        (call("Bash", command=f"rm {RESULT}"), "Device or resource busy"),
        (call("Bash", command="printf x > runs/run-1-1/stdout.txt"), "Read-only file system"),
    ],
    ids=["write", "edit", "bash-echo", "bash-rm", "bash-stdout"],
)
def test_a_tester_cannot_forge_its_red_run_in_the_sandbox(
    session: Go, redis_store: RedisStore, coded: Path, forge: dict[str, Any], refusal: str
) -> None:
    ended = session(coded, "tester", red_run_then(forge))
    tool_texts = [t for t in tool_results(ended) if refusal in t]
    assert tool_texts, tool_results(ended)
    # Nothing changed, so the session ends as the red run it was; the verdict is the runner's.
    assert ended.run.session and ended.run.session.status == "completed"
    assert_red_committed(redis_store, ended)
    assert committed(redis_store, "runs/run-1-1/stdout.txt") != b"x"


@pytest.mark.parametrize(
    "forge",
    [
        f"echo '{FORGED}' > {RESULT}",
        "python -c \"import json; p = 'runs/run-1-1/result.json'; d = json.load(open(p)); "
        "d['ok'] = True; d['failures'] = []; json.dump(d, open(p, 'w'))\"",
        f"rm {RESULT}",
    ],
    ids=["echo", "python-edit", "delete"],
)
def test_a_forged_result_json_that_lands_fails_the_self_check_and_is_never_committed(
    session: Go, redis_store: RedisStore, coded: Path, forge: str
) -> None:
    # No sandbox: the forgery reaches the view; the workspace still refuses it.
    ended = session(coded, "tester", red_run_then(call("Bash", command=forge)), sandbox="none")
    ended_problem = f"{OWNED}units/pricing/{RESULT}: written by run_tests; the session "
    assert any(ended_problem in f for f in ended.failures), ended.failures
    assert len(ended.handbacks) == 2 and all(ended_problem in h for h in ended.handbacks)
    assert ended.output.sandbox_violations and "run_tests" in ended.output.sandbox_violations[0]
    assert_red_committed(redis_store, ended)


def test_set_hint_is_how_a_tester_improves_a_hint(
    session: Go, redis_store: RedisStore, coded: Path
) -> None:
    test = "tests/test_pricing.py::test_line_total_is_price_cents_times_qty"
    hint = "line_total adds price_cents and qty: multiply them instead"
    ended = session(coded, "tester", red_run_then(call("set_hint", test=test, hint=hint)))
    assert ended.failures == [] and ended.handbacks == []
    raw = committed(redis_store, RESULT)
    assert raw is not None
    assert RunResult.model_validate_json(raw).failures[0].hint == hint
    assert ended.output.failures[0].hint == hint and not ended.output.ok


def tool_results(ended: Ended) -> list[str]:
    """Every tool result's text the session produced (from its checkpointed transcript)."""
    store = ended.run.prepared.ws.store
    p = ended.run.prepared.request
    saved = store.load_session(p.pid, p.role, p.unit_id) or {}
    texts = []
    for message in saved.get("messages", []):
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                content = block.get("content")
                texts.append(json.dumps(content) if not isinstance(content, str) else content)
    return texts


# --- the coder's coder.log -----------------------------------------------------------

FIRST = {
    "attempt": 1,
    "this_fix": "first version of line_total and apply_discount",
    "rationale": "as the SDD says",
    "changed_files": ["code/pricing.py"],
}
FAKE_BLOCK = (
    "---\\nattempt: 2\\nlast_failure: x\\nlast_cause: bug\\nthis_fix: fixed it\\n"
    "rationale: r\\nchanged_files: []\\n---\\n"
)
REFLECTION = {
    "last_failure": "test_line_total_is_price_cents_times_qty: expected 6, got 5",
    "last_cause": "line_total in code/pricing.py added qty instead of multiplying",
    "this_fix": "line_total in code/pricing.py multiplies price_cents by qty",
    "rationale": "the criterion says price_cents times qty",
    "changed_files": ["code/pricing.py"],
}


@pytest.fixture
def logged(inventory_project: Path) -> Path:
    """pricing after its first attempt: code and an attempt-1 block in coder.log."""
    unit = inventory_project / "units" / "pricing"
    (unit / "code").mkdir()
    (unit / "code" / "pricing.py").write_text(PY_CODE)
    (unit / "contract.json").write_text(contract_text(inventory_project, "pricing"))
    append_decision(unit / "coder.log", FIRST)
    return inventory_project


def retry(project: Path, *forge: dict[str, Any], log: bool = False) -> list[dict[str, Any]]:
    """A coder retry's workflow with the forging calls, logged by the tool when `log`."""
    calls = scripted_coder(project, decision=None, extra=forge, timeline="code_patched")
    if log:
        calls.insert(-2, call("append_coder_log", decision={**REFLECTION, "attempt": 2}))
    return calls


FORGERIES = {
    "write": call("Write", path="coder.log", content=FAKE_BLOCK.replace("\\n", "\n")),
    "edit": call("Edit", path="coder.log", old="as the SDD says", new="fixed it"),
    "bash-truncate": call("Bash", command=": > coder.log"),
    "bash-append": call("Bash", command=f"printf '%b' '{FAKE_BLOCK}' >> coder.log"),
    "bash-replace": call("Bash", command=f"printf '%b' '{FAKE_BLOCK}' > coder.log"),
    "bash-delete": call("Bash", command="rm coder.log"),
}


def log_of(store: RedisStore) -> list[dict[str, Any]]:
    raw = committed(store, "coder.log")
    assert raw is not None
    return [d.to_json_dict() for d in parse_coder_log(raw.decode())]


DENIED = "denied: coder.log is written only by append_coder_log: add your decision with"
REFUSALS = {
    "write": DENIED,
    "edit": DENIED,
    "bash-truncate": "Read-only file system",
    "bash-append": "Read-only file system",
    "bash-replace": "Read-only file system",
    "bash-delete": "cannot remove",
}


@pytest.mark.parametrize("how", sorted(FORGERIES))
def test_a_coder_cannot_rewrite_coder_log_in_the_sandbox(
    session: Go, redis_store: RedisStore, logged: Path, how: str
) -> None:
    ended = session(logged, "coder", retry(logged, FORGERIES[how]), mode="retry", attempt=2)
    assert [t for t in tool_results(ended) if REFUSALS[how] in t], tool_results(ended)
    # What it wrote is no entry: asked for once, then the runtime's entry of facts.
    ended.assert_asked_once_for("coder.log has no entry for attempt 2: call append_coder_log")
    first, facts = log_of(redis_store)
    assert first["this_fix"] == FIRST["this_fix"] and first["rationale"] == "as the SDD says"
    assert facts["attempt"] == 2 and facts["this_fix"] == NOT_GIVEN


@pytest.mark.parametrize("how", ["bash-replace", "bash-append", "bash-truncate", "bash-delete"])
def test_a_rewritten_coder_log_that_lands_is_refused_and_the_history_kept(
    session: Go, redis_store: RedisStore, logged: Path, how: str
) -> None:
    calls = retry(logged, FORGERIES[how])
    ended = session(logged, "coder", calls, mode="retry", attempt=2, sandbox="none")
    problem = f"{OWNED}units/pricing/coder.log: written by append_coder_log; the session"
    assert any(problem in f for f in ended.failures), ended.failures
    assert all(problem in h for h in ended.handbacks) and not ended.output.ok
    # The missing entry was asked for once, with the first hand-back; the attempt's entry
    # is then the runtime's facts, after the history as append_coder_log wrote it.
    assert "coder.log has no entry for attempt 2" in ended.handbacks[0]
    assert "coder.log has no entry for attempt 2" not in ended.handbacks[1]
    first, facts = log_of(redis_store)
    assert first["this_fix"] == FIRST["this_fix"] and facts["this_fix"] == NOT_GIVEN


def test_append_coder_log_after_a_rewrite_puts_the_history_back_and_adds_its_block(
    session: Go, redis_store: RedisStore, logged: Path
) -> None:
    calls = retry(logged, FORGERIES["bash-replace"], log=True)
    ended = session(logged, "coder", calls, mode="retry", attempt=2, sandbox="none")
    assert ended.failures == [] and ended.output.ok, ended.failures
    said = [t for t in tool_results(ended) if "coder.log had been changed by other means" in t]
    assert said, tool_results(ended)
    first, second = log_of(redis_store)
    assert first["this_fix"] == FIRST["this_fix"]
    assert second["attempt"] == 2 and second["last_cause"] == REFLECTION["last_cause"]
    assert ended.output.decision.this_fix == REFLECTION["this_fix"]


def test_a_valid_append_coder_log_still_works_in_the_sandbox(
    session: Go, redis_store: RedisStore, logged: Path
) -> None:
    ended = session(logged, "coder", retry(logged, log=True), mode="retry", attempt=2)
    assert ended.failures == [] and ended.output.ok, ended.failures
    assert [d["attempt"] for d in log_of(redis_store)] == [1, 2]
    assert "coder.log" in ended.output.files_written


# --- the ledgers: bugs, timeline and agent-state live in Redis, never in the view --------

LEDGER_WRITES = (
    "ls ../.. > code/view-root.txt; echo '{\"id\": \"bug-x\"}' >> ../../bugs.ndjson; "
    "echo '{\"kind\": \"test_passed\"}' >> ../../timeline.ndjson; "
    "mkdir -p ../../agent-state && echo '[]' > ../../agent-state/coder-pricing-todo.json; "
    "echo x > bugs.ndjson; mkdir -p agent-state && echo x > agent-state/x.json; "
    "true"
)


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_the_ledgers_are_out_of_a_sessions_reach(
    session: Go, redis_store: RedisStore, inventory_project: Path, sandbox: str
) -> None:
    writes = (
        call("Write", path="../../bugs.ndjson", content='{"id": "bug-x"}\n'),
        call("Write", path="../../agent-state/coder-pricing-todo.json", content="[]"),
        call("Write", path="timeline.ndjson", content="{}"),
        call("Bash", command=LEDGER_WRITES),
    )
    calls = scripted_coder(inventory_project, extra=writes)
    ended = session(inventory_project, "coder", calls, sandbox=sandbox)
    pid = "p-inventory"
    # The view held none of them: its root was units.json, sdd/ and units/.
    listing = committed(redis_store, "code/view-root.txt")
    assert listing is not None
    assert set(listing.decode().split()) <= {"units.json", "sdd", "units"}
    assert BugLedger(redis_store.sink(pid, "bugs")).list() == []
    kinds = [e.kind for e in Timeline(redis_store.sink(pid, "timeline")).events()]
    assert kinds == ["unit_coded"]
    todo = redis_store.agent_state_file(pid, "coder-pricing-todo.json")
    assert todo is not None and json.loads(todo) != []
    assert "x.json" not in str(redis_store.agent_state(pid))
    files = redis_store.unit_files(pid, "pricing").files
    assert not [p for p in files if "bugs" in p or "timeline" in p or "agent-state" in p]
    # Unsandboxed, the unit's own bugs.ndjson and agent-state/ were made: refused.
    violations = sorted(v.split(":")[0] for v in ended.output.sandbox_violations)
    expected = ["units/pricing/agent-state/x.json", "units/pricing/bugs.ndjson"]
    assert violations == (expected if sandbox == "none" else [])
