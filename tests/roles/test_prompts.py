"""The role prompts rendered with the context the runtime builds for a real prepared view.

prompts/*.md use StrictUndefined, so a variable the runtime forgets (or misspells) fails
here rather than in a session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest
from jinja2 import meta

from devloop.agent.checkpoint import StoreCheckpointer
from devloop.agent.reassess import make_reassess
from devloop.agent.spec import SessionSpec
from devloop.config import Settings
from devloop.ledgers import format_decision
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.models import CoderDecision, Failure, HistoryEntry, RunResult, RunSummary
from devloop.project import load_project
from devloop.prompts import PROMPTS_DIR, render
from devloop.roles import context
from devloop.roles.registry import all_tools
from devloop.roles.runtime import Prepared, Role, RoleRequest, prepare, prompt_context
from devloop.store import RedisStore

PID, UNIT = "p-inventory", "orders"
# Six notes per role: the prompt shows the five most relevant, most relevant first.
NOTES = {
    "sqlite-in-memory": 0.9,
    "integer-cents": 0.8,
    "no-cross-imports": 0.7,
    "errors-in-contract": 0.6,
    "small-diffs": 0.5,
    "old-trivia": 0.1,
}
FAILED = "tests/test_orders.py::test_an_order_without_a_discount_is_charged_the_line_total"
REGRESSED = "tests/test_orders.py::test_save10_charges_the_discounted_line_total"


def note(topic: str, relevance: float) -> str:
    return f"---\ntopic: {topic}\nrelevance: {relevance}\n---\nRemember {topic}.\n"


def failure(test: str, hint: str, expected: object = None, got: object = None) -> Failure:
    return Failure(test=test, expected=expected, got=got, stack="E  KeyError", hint=hint)


def run_file(run_id: str, attempt: int, failures: list[Failure]) -> str:
    summary = RunSummary(total=5, passed=5 - len(failures), failed=len(failures))
    result = RunResult(
        run_id=run_id, unit_id=UNIT, attempt=attempt, ok=False, summary=summary, failures=failures
    )
    return json.dumps(result.to_json_dict())


@pytest.fixture
def store(
    redis_store: RedisStore, inventory_project: Path, python_toolchain_dir: Path
) -> RedisStore:
    """The inventory project after two red attempts of orders, with notes for both roles."""
    unit = inventory_project / "units" / UNIT
    (unit / "runs" / "run-1-1").mkdir(parents=True)
    (unit / "runs" / "run-2-1").mkdir(parents=True)
    first = failure(FAILED, "Read the optional discount with request.get('discount').")
    (unit / "runs" / "run-1-1" / "result.json").write_text(run_file("run-1-1", 1, [first]))
    second = failure(REGRESSED, "apply_discount is now skipped for SAVE10.", 2250, 2500)
    (unit / "runs" / "run-2-1" / "result.json").write_text(run_file("run-2-1", 2, [second]))
    decisions = [
        CoderDecision(attempt=1, this_fix="First OrderBook", rationale="r1", changed_files=[]),
        CoderDecision(
            attempt=2,
            last_failure="KeyError: 'discount'",
            last_cause="indexed the optional discount",
            this_fix="Dropped the discount lookup",
            rationale="r2",
            changed_files=["code/orders.py"],
        ),
    ]
    (unit / "coder.log").write_text("".join(format_decision(d) for d in decisions))
    for role in ("coder", "tester"):
        notes = inventory_project / "memory" / "devloop" / role
        notes.mkdir(parents=True)
        for topic, relevance in NOTES.items():
            (notes / f"{topic}.md").write_text(note(topic, relevance))
    redis_store.import_project(load_project(inventory_project))
    return redis_store


@pytest.fixture
def prepared(store: RedisStore, settings: Settings) -> Iterator[list[Prepared]]:
    """Prepared sessions, their views removed afterwards."""
    made: list[Prepared] = []
    yield made
    for p in made:
        p.ws.cleanup()


def rendered(
    store: RedisStore, settings: Settings, made: list[Prepared], request: RoleRequest
) -> str:
    """The system prompt the runtime would send for this request."""
    p = prepare(store, settings, request, lambda event: None)
    made.append(p)
    history: list[HistoryEntry] = []
    regressions: list[str] = []
    if request.mode == "retry" and request.role == "coder":
        files = store.unit_files(PID, UNIT).files
        history, regressions = context.retry_history(files, request.attempt)
    return render(request.role, **prompt_context(store, p, history, regressions))


def assert_common(text: str, store: RedisStore) -> None:
    """Memory, the SDD section, acceptance, upstream contracts and conventions are all there."""
    shown = [t for t in NOTES if f"### {t} (relevance" in text]
    assert shown == list(NOTES)[:5]
    where = [text.index(f"### {t} (") for t in shown]
    assert where == sorted(where)
    assert "Remember sqlite-in-memory." in text and "old-trivia" not in text
    assert "<h2>orders: placing orders</h2>" in text
    assert "OrderBook.place({sku, qty, discount?})" in text  # the SDD contract
    spec = store.unit_spec(PID, UNIT)
    assert spec is not None and len(spec.acceptance_criteria) == 3
    assert all(f"- {item}\n" in text for item in spec.acceptance_criteria)
    assert "### stock-db\n```json" in text and "StockRepo.take(sku, qty)" in text
    assert "### pricing\n```json" in text and "apply_discount(total_cents, code)" in text
    assert "Money is integer cents" in text  # conventions.md


def test_the_coder_prompt_in_implement_mode(
    store: RedisStore, settings: Settings, prepared: list[Prepared]
) -> None:
    text = rendered(store, settings, prepared, RoleRequest(PID, UNIT, "coder", "implement", 1))
    assert_common(text, store)
    assert "Mode: **implement** (attempt 1)" in text
    assert "implement unit `orders` (be, python stack) of project `p-inventory`" in text
    assert "- `code/**`\n- `contract.json`\n- `coder.log`\n" in text
    assert "`../stock-db/contract.json`, `../pricing/contract.json` (upstream contracts" in text
    assert "it must say ok (expected `sha256:8bc64074f1c325cd`)" in text
    assert "PYTHONPYCACHEPREFIX=/tmp/pycache python -m py_compile code/*.py" in text
    assert "`timeline_append` (`unit_coded`)" in text
    assert "## Retry history" not in text


def test_the_coder_prompt_in_retry_mode_carries_the_history(
    store: RedisStore, settings: Settings, prepared: list[Prepared]
) -> None:
    request = RoleRequest(PID, UNIT, "coder", "retry", 3, reflect_hint="Keep SAVE10 working.")
    text = rendered(store, settings, prepared, request)
    assert_common(text, store)
    assert "Mode: **retry** (attempt 3)" in text and "`timeline_append` (`code_patched`)" in text
    history = text[text.index("## Retry history") :]
    # Each attempt: the decision as logged, then what the tester said with its hint.
    assert history.index("### Attempt 1") < history.index("### Attempt 2")
    assert "this_fix: First OrderBook" in history
    assert "last_cause: indexed the optional discount" in history
    assert f"- `{FAILED}`.\n  Hint: Read the optional discount with request.get('discount')." in (
        history
    )
    assert f"- `{REGRESSED}`: expected 2250, got 2500.\n  Hint: apply_discount" in history
    assert "Hint for this attempt: Keep SAVE10 working." in history
    assert f"(a regression you introduced):\n- {REGRESSED}\n" in history
    assert "with last_failure, last_cause and this_fix" in text


@pytest.mark.parametrize("mode", ["test", "retry"])
def test_the_tester_prompt(
    store: RedisStore, settings: Settings, prepared: list[Prepared], mode: str
) -> None:
    request = RoleRequest(PID, UNIT, "tester", mode, 2, run_id="run-2-2")
    text = rendered(store, settings, prepared, request)
    assert_common(text, store)
    assert f"Mode: **{mode}** (attempt 2, run `run-2-2`)" in text
    assert "- `tests/**`\n- `runs/run-2-2/**`\n" in text
    assert "`tests/test_*.py` with pytest, importing the real modules from `code/`" in text
    assert "per acceptance criterion (3) and per contract status code (none declared)" in text
    assert "writes `runs/run-2-2/result.json`" in text


def test_the_tester_prompt_lists_the_contract_status_codes(
    redis_store: RedisStore,
    settings: Settings,
    todo_project: Path,
    node_toolchain_dir: Path,
    prepared: list[Prepared],
) -> None:
    redis_store.import_project(load_project(todo_project))
    request = RoleRequest("p-todo", "todo-be", "tester", "test", 1, run_id="run-1-1")
    p = prepare(redis_store, settings, request, lambda event: None)
    prepared.append(p)
    text = render("tester", **prompt_context(redis_store, p, [], []))
    assert "per acceptance criterion (3) and per contract status code (200, 201, 400)" in text
    assert "supertest against the real Express app" in text
    assert "(no notes yet)" in text and "(none beyond the rules above)" in text


@pytest.mark.parametrize("role", ["coder", "tester"])
def test_every_prompt_variable_comes_from_the_runtime(
    store: RedisStore, settings: Settings, prepared: list[Prepared], role: Role
) -> None:
    run_id = "run-2-2" if role == "tester" else None
    request = RoleRequest(PID, UNIT, role, "retry", 2, run_id=run_id)
    p = prepare(store, settings, request, lambda event: None)
    prepared.append(p)
    env = jinja2.Environment()
    used = meta.find_undeclared_variables(env.parse((PROMPTS_DIR / f"{role}.md").read_text()))
    assert used <= set(prompt_context(store, p, [], []))


def test_the_reassess_prompt_as_the_runtime_sends_it(
    store: RedisStore, settings: Settings, prepared: list[Prepared]
) -> None:
    p = prepare(store, settings, RoleRequest(PID, UNIT, "coder", "implement", 1), lambda e: None)
    prepared.append(p)
    (p.ctx.unit_dir / "code").mkdir()
    (p.ctx.unit_dir / "code" / "orders.py").write_text("x = 1\n")
    plan = "1. Read code/orders.py.\nDo not touch again: spec.json"
    key = f"coder.c-demo.{PID}.{UNIT}"
    script = {"sessions": {f"{key}.reassess.1.1": {"default": {"content": [{"text": plan}]}}}}
    with StubServer(script) as stub:
        llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
        parent = SessionSpec(key, "coder", "implement", 1, "claude-sonnet-4-6", "(parent)")
        reassess = make_reassess(
            parent,
            llm,
            all_tools(),
            p.ctx,
            lambda n: StoreCheckpointer(store, PID, f"reassess.coder.1.{n}", UNIT),
        )
        got = reassess(
            "the same error repeated 3 times",
            "Edit: `old` was not found",
            p.ws.describe_changes(),
        )
        [request] = stub.requests
    assert got == plan
    system = request.body["system"][0]["text"]
    assert "reviewing a coder session of DevLoop that got stuck on unit `orders`" in system
    assert "Why it was judged stuck (measured, not guessed): the same error repeated 3 times" in (
        system
    )
    assert "The last error it met:\nEdit: `old` was not found" in system
    assert "since it started:\nchanged (6 bytes): code/orders.py" in system
    assert [t["name"] for t in request.body["tools"]] == ["Read", "Bash"]
