"""The runtime's self-checks, one failure at a time, in real role sessions against the stub.

Each session does the role's whole workflow except one thing, then says it is done three
times: the runtime must hand the failure back twice, naming the problem, and then end
the session `failed` / `validation_failed`. A control session per role proves the
workflow alone passes, so each failure below comes from the one thing left out.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devloop.agent.toolloop import REMINDER
from devloop.agent.tools import ToolContext
from devloop.core.config import Settings
from devloop.core.contracts import hash_contract
from devloop.core.models import CoderOutput, TesterOutput
from devloop.ledgers import BugLedger, FileSink, Timeline
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles import checks
from devloop.roles.coder import run_coder
from devloop.roles.coder_tools import NOT_GIVEN
from devloop.roles.runtime import RoleRequest, RoleRun
from devloop.roles.services import RoleServices
from devloop.roles.tester import run_tester
from devloop.store import RedisStore

HANDBACK = "The runtime's self-check failed"
DONE = {"content": [{"text": "Done: the work is finished."}]}
PY_CODE = '''"""Prices in cents."""


class InvalidDiscount(ValueError):
    """An unknown discount code."""


def line_total(price_cents: int, qty: int) -> int:
    """price_cents times qty."""
    return price_cents * qty


def apply_discount(total_cents: int, code: str) -> int:
    """10% off with SAVE10, the discount rounded down."""
    if code != "SAVE10":
        raise InvalidDiscount(code)
    return total_cents - total_cents // 10
'''
# One test named after each of pricing's three acceptance criteria; {last} is what the
# first expects of line_total(2, 3) (6: green, 5: red).
PY_TESTS = """import pytest

from pricing import InvalidDiscount, apply_discount, line_total


def test_line_total_is_price_cents_times_qty():
    assert line_total(2, 3) == {last}


def test_save10_takes_ten_percent_off_rounding_the_discount_down():
    assert apply_discount(999, "SAVE10") == 900


def test_an_unknown_discount_code_raises_invalid_discount():
    with pytest.raises(InvalidDiscount):
        apply_discount(100, "NOPE")
"""
FIRST = "tests/test_pricing.py::test_line_total_is_price_cents_times_qty"
RED = ("unit_tested", "test_failed")  # the timeline of a red run
DECISION = {"this_fix": "first version", "rationale": "as the SDD says"}


def call(name: str, **args: Any) -> dict[str, Any]:
    """One tool_use block of a scripted turn."""
    return {"tool_use": {"name": name, "input": args}}


def todolist(n: int) -> dict[str, Any]:
    items = [{"id": f"step-{i:03d}", "title": f"step {i}"} for i in range(1, n + 1)]
    return call("write_todolist", items=items)


def all_done(n: int) -> list[dict[str, Any]]:
    return [call("update_todo_item", id=f"step-{i:03d}", status="done") for i in range(1, n + 1)]


@dataclass
class Ended:
    """A driven session: what the role reported, every self-check hand-back it got and
    every reminder of what only the model can give."""

    run: RoleRun
    output: CoderOutput | TesterOutput
    handbacks: list[str]
    reminders: list[str] = field(default_factory=list)
    requests: list[Any] = field(default_factory=list)  # what the stub was asked, in order

    @property
    def failures(self) -> list[str]:
        assert self.run.session is not None
        return self.run.session.self_check_failures

    def assert_failed_on(self, problem: str) -> None:
        """Ended validation_failed after two hand-backs, each naming the problem."""
        session = self.run.session
        assert session is not None
        assert (session.status, session.terminal_reason) == ("failed", "validation_failed")
        assert any(problem in f for f in self.failures), self.failures
        assert len(self.handbacks) == 2 and all(problem in h for h in self.handbacks)
        assert not self.output.ok

    def assert_asked_once_for(self, owed: str) -> None:
        """Completed after one reminder naming what the model owed, which it never gave:
        recorded as missing, not a failure."""
        session = self.run.session
        assert session is not None
        assert (session.status, session.terminal_reason) == ("completed", "end_turn")
        assert self.failures == [] and self.handbacks == []
        assert len(self.reminders) == 1 and owed in self.reminders[0], self.reminders
        assert any(owed in m for m in session.paperwork_missing), session.paperwork_missing


Drive = Callable[..., Ended]


@pytest.fixture
def drive(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path
) -> Iterator[Drive]:
    """Import a project, script one session of a role on a unit, run it to its end."""
    stubs: list[StubServer] = []

    def go(
        project: Path,
        role: str,
        unit: str,
        calls: list[dict[str, Any]],
        mode: str | None = None,
        attempt: int = 1,
    ) -> Ended:
        loaded = load_project(project)
        redis_store.import_project(loaded)
        turns = {1: {"content": calls}}
        stub = StubServer({"sessions": {f"{role}.*.{unit}": {"turns": turns, "default": DONE}}},
                          record_bodies=True)
        stubs.append(stub.start())
        llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
        out: CoderOutput | TesterOutput
        if role == "coder":
            request = RoleRequest(loaded.pid, unit, "coder", mode or "implement", attempt)
            run, out = run_coder(redis_store, settings, llm, request)
        else:
            run_id = f"run-{attempt}-1"
            request = RoleRequest(loaded.pid, unit, "tester", mode or "test", attempt, run_id)
            run, out = run_tester(redis_store, settings, llm, request)
        return Ended(run, out, handbacks(stub), reminders(stub), list(stub.requests))

    yield go
    for stub in stubs:
        stub.stop()


def handbacks(stub: StubServer) -> list[str]:
    """The self-check texts the runtime sent the model (last user message of each request)."""
    found = []
    for request in stub.requests:
        last = request.body["messages"][-1]
        for block in last["content"] if last["role"] == "user" else []:
            if block.get("type") == "text" and block["text"].startswith(HANDBACK):
                found.append(block["text"])
    return found


def reminders(stub: StubServer) -> list[str]:
    """The reminders of what only the model can give the runtime sent it."""
    found = []
    for request in stub.requests:
        last = request.body["messages"][-1]
        for block in last["content"] if last["role"] == "user" else []:
            if block.get("type") == "text" and REMINDER in block["text"]:
                found.append(block["text"])
    return found


def contract_text(project: Path, unit: str, **change: Any) -> str:
    """contract.json as the SDD declares it (exports changed by `change`), correctly hashed."""
    contract = load_project(project).sdd_contracts[unit]
    exports = {**contract["exports"], **change}
    body = {"unit_id": unit, "exports": exports, "consumes": contract.get("consumes", [])}
    return json.dumps({**body, "version": hash_contract(body)}, indent=2)


def scripted_coder(
    project: Path,
    unit: str = "pricing",
    files: dict[str, str] | None = None,
    contract: str | None = None,
    decision: dict[str, Any] | None = DECISION,
    done: int = 2,
    extra: tuple[dict[str, Any], ...] = (),
    timeline: str | None = "unit_coded",
) -> list[dict[str, Any]]:
    """The coder's whole workflow in one turn; each argument swaps out one part of it."""
    files = files if files is not None else {"code/pricing.py": PY_CODE}
    written = [call("Write", path=p, content=c) for p, c in files.items()]
    logged = {**decision, "changed_files": list(files)} if decision else None
    return [
        todolist(2),
        *written,
        call("Write", path="contract.json", content=contract or contract_text(project, unit)),
        *extra,
        *([call("append_coder_log", decision=logged)] if logged else []),
        *([call("timeline_append", kind=timeline, summary="coded")] if timeline else []),
        *all_done(done),
    ]


# --- coder ----------------------------------------------------------------------------


def test_the_coder_workflow_alone_passes_its_self_check(
    drive: Drive, inventory_project: Path
) -> None:
    ended = drive(inventory_project, "coder", "pricing", scripted_coder(inventory_project))
    assert ended.run.session and ended.run.session.status == "completed"
    assert ended.failures == [] and ended.handbacks == [] and ended.output.ok


@pytest.mark.parametrize(
    ("contract", "problem"),
    [
        ("changed exports", "contract does not match SDD-declared hash (expected sha256:fe7f"),
        ("hand-made version", "contract.version self-inconsistent"),
    ],
)
def test_a_contract_hash_mismatch_fails_the_coder(
    drive: Drive, inventory_project: Path, contract: str, problem: str
) -> None:
    if contract == "changed exports":
        text = contract_text(inventory_project, "pricing", errors={})
    else:
        text = contract_text(inventory_project, "pricing").replace('"sha256:', '"sha256:00')
    calls = scripted_coder(inventory_project, contract=text)
    ended = drive(inventory_project, "coder", "pricing", calls)
    ended.assert_failed_on("contract_bridge: " + problem)
    assert isinstance(ended.output, CoderOutput) and not ended.output.contract_match_sdd
    assert len(ended.failures) == 1


def test_python_code_that_does_not_compile_fails_the_coder(
    drive: Drive, inventory_project: Path
) -> None:
    broken = {"code/pricing.py": "def line_total(price_cents, qty:\n    return 0\n"}
    calls = scripted_coder(inventory_project, files=broken)
    ended = drive(inventory_project, "coder", "pricing", calls)
    ended.assert_failed_on("syntax check failed")
    assert "SyntaxError" in ended.failures[0] and len(ended.failures) == 1
    # py_compile's bytecode went to /tmp, not into the coder's code/.
    assert isinstance(ended.output, CoderOutput)
    assert ended.output.files_written == ["code/pricing.py", "coder.log", "contract.json"]


def test_javascript_that_node_check_rejects_fails_the_coder(
    drive: Drive, todo_project: Path, node_toolchain_dir: Path
) -> None:
    broken = {"code/server.js": "const app = require('express')(;\nmodule.exports = app;\n"}
    calls = scripted_coder(todo_project, "todo-be", files=broken, contract=None)
    ended = drive(todo_project, "coder", "todo-be", calls)
    ended.assert_failed_on("syntax check failed")
    assert "code/server.js" in ended.failures[0] and "SyntaxError" in ended.failures[0]
    assert len(ended.failures) == 1


def test_a_vue_component_that_vite_cannot_build_fails_the_coder(
    drive: Drive, todo_project: Path, node_toolchain_dir: Path
) -> None:
    vue = "<script setup>\nconst items = [;\n</script>\n<template><ul/></template>\n"
    broken = {"code/TodoList.vue": vue}
    calls = scripted_coder(todo_project, "todo-fe", files=broken)
    ended = drive(todo_project, "coder", "todo-fe", calls)
    ended.assert_failed_on("syntax check failed")
    assert "TodoList.vue" in ended.failures[0] and len(ended.failures) == 1


def test_a_missing_coder_log_entry_is_asked_for_once_then_its_facts_are_logged(
    drive: Drive, inventory_project: Path
) -> None:
    calls = scripted_coder(inventory_project, decision=None)
    ended = drive(inventory_project, "coder", "pricing", calls)
    ended.assert_asked_once_for("coder.log has no entry for attempt 1: call append_coder_log")
    assert "this_fix and rationale" in ended.reminders[0]
    # The code is right: the attempt stands, and coder.log has its entry of facts.
    assert ended.output.ok and isinstance(ended.output, CoderOutput)
    assert ended.output.decision.this_fix == NOT_GIVEN
    assert "coder.log" in ended.output.files_written


def test_a_retry_entry_the_coder_writes_by_hand_is_no_entry_and_is_asked_for(
    drive: Drive, inventory_project: Path
) -> None:
    # append_coder_log refuses such an entry, and so is the coder's writing it by hand.
    entry = "---\nattempt: 2\nthis_fix: read qty\nrationale: why\nchanged_files: []\n---\n"
    refused = call("append_coder_log", decision={**DECISION, "changed_files": []})
    by_hand = call("Write", path="coder.log", content=entry)
    calls = scripted_coder(
        inventory_project, decision=None, extra=(refused, by_hand), timeline="code_patched"
    )
    ended = drive(inventory_project, "coder", "pricing", calls, mode="retry", attempt=2)
    ended.assert_asked_once_for("coder.log has no entry for attempt 2: call append_coder_log")
    assert "last_failure, last_cause, this_fix and rationale" in ended.reminders[0]


def test_a_write_outside_the_write_set_fails_the_coder(
    drive: Drive, inventory_project: Path
) -> None:
    # code/ is writable, so the sandbox lets the link be made; the runtime refuses it.
    escape = call("Bash", command="ln -s /etc/hostname code/hostname.txt")
    calls = scripted_coder(inventory_project, extra=(escape,))
    ended = drive(inventory_project, "coder", "pricing", calls)
    ended.assert_failed_on(
        "writes outside your write set: units/pricing/code/hostname.txt: "
        "symlink points outside the view (/etc/hostname)"
    )
    assert len(ended.failures) == 1
    assert isinstance(ended.output, CoderOutput)
    assert ended.output.files_written == ["code/pricing.py", "coder.log", "contract.json"]


@pytest.mark.parametrize(
    ("done", "owed"),
    [
        (1, "todolist items not done: step-002:"),
        (0, "todolist items not done: step-001, step-002:"),
    ],
)
def test_an_unfinished_todolist_is_asked_for_once_by_item(
    drive: Drive, inventory_project: Path, done: int, owed: str
) -> None:
    calls = scripted_coder(inventory_project, done=done)
    ended = drive(inventory_project, "coder", "pricing", calls)
    ended.assert_asked_once_for(owed)
    assert "update_todo_item" in ended.reminders[0] and "'step 2'" in ended.reminders[0]
    assert ended.output.ok


def test_the_coder_s_timeline_event_is_the_runtime_s_whatever_the_model_appends(
    drive: Drive, redis_store: RedisStore, inventory_project: Path
) -> None:
    # No timeline_append at all, then the wrong kind: one unit_coded, from the commit.
    for timeline in (None, "code_patched"):
        ended = drive(inventory_project, "coder", "pricing",
                      scripted_coder(inventory_project, timeline=timeline))
        assert ended.failures == [] and ended.reminders == [] and ended.output.ok
        events = Timeline(redis_store.sink("p-inventory", "timeline")).events(unit_id="pricing")
        assert [(e.kind, e.ref, e.agent) for e in events] == [
            ("unit_coded", "code/pricing.py", "coder")
        ]
        redis_store.delete_project("p-inventory")


def test_no_todolist_at_all_is_asked_for_once(drive: Drive, inventory_project: Path) -> None:
    calls = scripted_coder(inventory_project, done=0)[1:]
    ended = drive(inventory_project, "coder", "pricing", calls)
    ended.assert_asked_once_for("no todolist: call write_todolist with your plan")
    assert ended.output.ok


# --- tester ---------------------------------------------------------------------------


@pytest.fixture
def coded_pricing(inventory_project: Path) -> Path:
    """The inventory project with pricing already coded (the tester's starting point)."""
    unit = inventory_project / "units" / "pricing"
    (unit / "code").mkdir()
    (unit / "code" / "pricing.py").write_text(PY_CODE)
    (unit / "contract.json").write_text(contract_text(inventory_project, "pricing"))
    return inventory_project


def scripted_tester(
    tests: str = PY_TESTS.format(last=6),
    run: bool = True,
    after_run: tuple[Any, ...] = (),
    timeline: tuple[str, ...] = ("unit_tested", "test_passed"),
) -> list[dict[str, Any]]:
    """The tester's whole workflow in one turn; each argument swaps out one part of it."""
    return [
        todolist(3),
        call("Write", path="tests/test_pricing.py", content=tests),
        *([call("run_tests")] if run else []),
        *after_run,
        *[call("timeline_append", kind=kind, summary="tested") for kind in timeline],
        *all_done(3),
    ]


def test_the_tester_workflow_alone_passes_its_self_check(drive: Drive, coded_pricing: Path) -> None:
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester())
    assert ended.run.session and ended.run.session.status == "completed"
    assert ended.failures == [] and ended.handbacks == [] and ended.output.ok


def test_an_exported_function_no_test_executes_fails_the_tester(
    drive: Drive, coded_pricing: Path
) -> None:
    code = coded_pricing / "units/pricing/code/pricing.py"
    code.write_text(code.read_text() + "\n\ndef unit_price(total_cents, qty):\n    return 0\n")
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester())
    ended.assert_failed_on(
        "no test executes code/pricing.py: unit_price(); write a test that calls it"
    )
    assert len(ended.failures) == 1
    assert isinstance(ended.output, TesterOutput) and ended.output.coverage is not None
    assert ended.output.coverage.unexecuted == ["code/pricing.py: unit_price"]
    assert ended.output.coverage.branches == 1.0


def test_a_red_run_with_hinted_bridged_failures_passes_the_self_check(
    drive: Drive, coded_pricing: Path
) -> None:
    red = scripted_tester(PY_TESTS.format(last=5), timeline=RED)
    ended = drive(coded_pricing, "tester", "pricing", red)
    assert ended.run.session and ended.run.session.status == "completed"
    assert ended.failures == [] and not ended.output.ok


def test_a_criterion_no_test_is_named_after_fails_the_tester_however_many_tests(
    drive: Drive, coded_pricing: Path
) -> None:
    # Ten tests, all of the first criterion: counting them would have passed.
    ten = "".join(
        f"\n\ndef test_line_total_is_price_cents_times_qty_{n}():\n"
        f"    assert line_total(2, {n}) == {2 * n}\n"
        for n in range(1, 11)
    )
    tests = "from pricing import line_total\n" + ten
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester(tests))
    ended.assert_failed_on("no test exercises these acceptance criteria")
    # ...and apply_discount is never called at all (measured by coverage).
    failure, unexecuted = ended.failures
    assert unexecuted.startswith("no test executes code/pricing.py: apply_discount()")
    assert "apply_discount(total_cents" in failure and "An unknown discount code" in failure
    assert "line_total(price_cents, qty)" not in failure
    assert isinstance(ended.output, TesterOutput)
    assert ended.output.acceptance_coverage == 0.333


def test_a_docstring_names_a_criterion_as_well_as_a_name_does(
    drive: Drive, coded_pricing: Path
) -> None:
    tests = PY_TESTS.format(last=6).replace(
        "def test_an_unknown_discount_code_raises_invalid_discount():\n",
        'def test_case_three():\n    """An unknown discount code raises InvalidDiscount."""\n',
    )
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester(tests))
    assert ended.failures == [] and ended.output.ok


NODE_TEST = "it('{title}', async () => {{ expect({code}).toBe({code}) }})\n"
TODO_CRITERIA = [
    "A created todo appears in GET /api/todos",
    "An empty or missing title returns 400 with error title_required",
    "A title longer than 200 characters returns 400 with error title_too_long",
]


@pytest.mark.parametrize(
    ("cases", "problem"),
    [
        (
            [(TODO_CRITERIA[0], 201), (TODO_CRITERIA[0], 200), (TODO_CRITERIA[0], 400)] * 3,
            "no test exercises these acceptance criteria (name each test after its "
            "criterion, or put the criterion in its docstring; a test named after several "
            "exercises only those whose values its code uses): 'An empty or missing title",
        ),
        (
            [(TODO_CRITERIA[0], 200), (TODO_CRITERIA[1], 400), (TODO_CRITERIA[2], 400)],
            "no test provokes and checks status 201: write a case per status code",
        ),
    ],
)
def test_unnamed_criteria_or_a_status_without_its_case_fail_the_tester(
    drive: Drive,
    todo_project: Path,
    node_toolchain_dir: Path,
    cases: list[tuple[str, int]],
    problem: str,
) -> None:
    spec = "".join(NODE_TEST.format(title=t, code=c) for t, c in cases)
    calls = [todolist(1), call("Write", path="tests/api.spec.js", content=spec), *all_done(1)]
    ended = drive(todo_project, "tester", "todo-be", calls)
    ended.assert_failed_on(problem)


def test_vi_mock_of_the_code_fails_the_tester(
    drive: Drive, todo_project: Path, node_toolchain_dir: Path
) -> None:
    spec = "import { vi } from 'vitest'\nvi.mock('../code/service.js')\n" + NODE_TEST.format(
        title=TODO_CRITERIA[0], code=201
    )
    calls = [todolist(1), call("Write", path="tests/api.spec.js", content=spec), *all_done(1)]
    ended = drive(todo_project, "tester", "todo-be", calls)
    ended.assert_failed_on("tests/api.spec.js mock the module under test: test the real code")


def test_patching_the_module_under_test_fails_the_tester_even_when_green(
    drive: Drive, coded_pricing: Path
) -> None:
    mocked = "from unittest.mock import patch\n\nimport pricing\n\n\n" + PY_TESTS.format(last=6)
    mocked += '\n\n@patch("pricing.line_total", return_value=7)\ndef test_patched(_):\n'
    mocked += "    assert pricing.line_total(1, 1) == 7\n"
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester(mocked))
    ended.assert_failed_on("tests/test_pricing.py mock the module under test")
    assert len(ended.failures) == 1
    assert isinstance(ended.output, TesterOutput) and ended.output.summary.passed == 4


@pytest.mark.parametrize(
    "source",
    [
        'with unittest.mock.patch("code.pricing.line_total"):',
        'mocker.patch("pricing.line_total", return_value=1)',
        'with patch.object(pricing, "line_total"):',
        'monkeypatch.setattr(pricing, "line_total", fake)',
        'monkeypatch.setattr("pricing.line_total", fake)',
    ],
)
def test_every_python_spelling_of_a_mock_of_the_code_is_caught(source: str) -> None:
    assert checks.mock_of_code("python", ["pricing"]).search(source)


@pytest.mark.parametrize(
    "source",
    [
        'with patch("pricing_fakes.line_total"):',
        'monkeypatch.setattr(pricing_double, "line_total", fake)',
        'monkeypatch.setenv("PRICING", "1")',
        'with patch("time.time", return_value=0):',
    ],
)
def test_mocks_of_the_outside_world_are_allowed(source: str) -> None:
    assert not checks.mock_of_code("python", ["pricing"]).search(source)


# The first test as the runner's hint builder cannot place: its hint is the fallback draft.
NO_RAISE = PY_TESTS.format(last=6).replace(
    "    assert line_total(2, 3) == 6\n",
    "    assert line_total(2, 3) == 6\n    with pytest.raises(ValueError):\n"
    "        line_total(2, 3)\n",
)


def test_the_hint_builder_s_fallback_draft_fails_the_tester(
    drive: Drive, coded_pricing: Path
) -> None:
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester(NO_RAISE, timeline=RED))
    ended.assert_failed_on(f"failure '{FIRST}' needs a hint that says what to change and where")
    assert "give it with set_hint" in ended.failures[0] and len(ended.failures) == 1


def test_a_hint_given_with_set_hint_replaces_the_draft(drive: Drive, coded_pricing: Path) -> None:
    better = call(
        "set_hint", test=FIRST,
        hint="line_total(2, 3) in code/pricing.py returns a total where the test wants "
        "ValueError: raise ValueError for that input",
    )
    calls = scripted_tester(NO_RAISE, after_run=(better,), timeline=RED)
    ended = drive(coded_pricing, "tester", "pricing", calls)
    assert ended.failures == [] and ended.handbacks == []
    assert ended.output.failures[0].hint.startswith("line_total(2, 3) in code/pricing.py")


@pytest.mark.parametrize(
    "hint",
    [
        "",
        "Fix the bug.",
        "expected 5, got 4",
        "请修复这个错误",
        "期望 5 收 6，检查对应分支处理",
        "Veuillez corriger le bug.",
        "Пожалуйста, исправьте ошибку в тесте.",
        FIRST,
        "test_line_total_is_price_cents_times_qty: please fix",
        "Check the handler logic more carefully and rewrite it",
    ],
)
def test_set_hint_refuses_a_hint_that_says_nothing_in_any_language(
    drive: Drive, coded_pricing: Path, hint: str
) -> None:
    calls = scripted_tester(
        NO_RAISE, after_run=(call("set_hint", test=FIRST, hint=hint),), timeline=RED
    )
    ended = drive(coded_pricing, "tester", "pricing", calls)
    ended.assert_failed_on(f"failure '{FIRST}' needs a hint that says what to change and where")
    assert ended.output.failures[0].hint != hint  # the draft stands, not the empty words


def test_set_hint_gives_every_failure_of_a_shared_test_name_its_hint(
    drive: Drive, todo_project: Path, node_toolchain_dir: Path
) -> None:
    # vitest lets two tests share a name; one set_hint must answer the check for both.
    title = TODO_CRITERIA[0]
    twice = "import { it, expect } from 'vitest'\n" + "".join(
        f"it('{title}', () => {{ expect({got}).toBe(201) }})\n" for got in (200, 500))
    hint = "code/service.js answers 200 and 500 where 201 is due: return 201 from the POST route"
    calls = [todolist(1), call("Write", path="tests/api.spec.js", content=twice),
             call("run_tests"), call("set_hint", test=f"tests/api.spec.js::{title}", hint=hint),
             *all_done(1)]
    ended = drive(todo_project, "tester", "todo-be", calls)
    assert isinstance(ended.output, TesterOutput)
    assert [f.hint for f in ended.output.failures] == [hint, hint]
    assert not any("needs a hint" in f for f in ended.failures), ended.failures


def test_a_specific_hint_in_chinese_passes_the_tester(drive: Drive, coded_pricing: Path) -> None:
    hint = "line_total 把 price_cents 和 qty 相乘了，但这个输入应该抛出 ValueError"
    calls = scripted_tester(
        NO_RAISE, after_run=(call("set_hint", test=FIRST, hint=hint),), timeline=RED
    )
    ended = drive(coded_pricing, "tester", "pricing", calls)
    assert ended.failures == [] and ended.handbacks == []
    assert isinstance(ended.output, TesterOutput) and ended.output.failures[0].hint == hint


def test_a_write_outside_the_write_set_fails_the_tester(drive: Drive, coded_pricing: Path) -> None:
    escape = call("Bash", command="ln -s /etc/hostname tests/hostname.txt")
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester(after_run=(escape,)))
    ended.assert_failed_on(
        "writes outside your write set: units/pricing/tests/hostname.txt: "
        "symlink points outside the view (/etc/hostname)"
    )
    assert len(ended.failures) == 1


@pytest.mark.parametrize("timeline", [(), ("unit_tested",), ("test_failed", "unit_tested")])
def test_the_tester_s_timeline_events_are_the_runtime_s_from_the_run(
    drive: Drive, redis_store: RedisStore, coded_pricing: Path, timeline: tuple[str, ...]
) -> None:
    # Whatever the model appends (nothing, half, a wrong verdict): the run's two events.
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester(timeline=timeline))
    assert ended.failures == [] and ended.reminders == [] and ended.output.ok
    events = Timeline(redis_store.sink("p-inventory", "timeline")).events(unit_id="pricing")
    assert [(e.kind, e.ref, e.agent) for e in events] == [
        ("unit_tested", "run-1-1", "tester"), ("test_passed", "run-1-1", "tester")
    ]
    assert all(e.summary.startswith("3/3 passed") for e in events)


def test_a_failure_not_bridged_to_a_bug_fails_the_tester(
    coded_pricing: Path, tmp_path: Path
) -> None:
    # run_tests bridges every failure, so only the runtime's own result can lack a bug id.
    hint = "line_total adds price_cents and qty in code/pricing.py: multiply them"
    failure = {"test": FIRST, "expected": 6, "got": 5, "hint": hint}
    result = {"run_id": "run-1-1", "unit_id": "pricing", "attempt": 1, "ok": False,
              "failures": [failure]}
    role = RoleServices(
        pid="p-inventory", unit_id="pricing", role="tester", attempt=1,
        units=load_project(coded_pricing).units,
        bugs=BugLedger(FileSink(tmp_path / "bugs.ndjson")),
        timeline=Timeline(FileSink(tmp_path / "timeline.ndjson")),
        save_state=lambda path, data: None, save_memory=lambda name, note: None,
        run_id="run-1-1", last_run={"result": result},
    )
    ctx = ToolContext(view=tmp_path, unit_id="pricing", role="tester", write_patterns=())
    assert checks._run_problems(ctx, role) == [
        f"failure '{FIRST}' is not bridged to a bug: call bug_open"
    ]


def test_no_test_run_fails_the_tester(drive: Drive, coded_pricing: Path) -> None:
    ended = drive(coded_pricing, "tester", "pricing", scripted_tester(run=False))
    ended.assert_failed_on("no test run for this attempt: call run_tests")
    assert len(ended.failures) == 1


def test_a_tester_red_with_the_same_failures_three_times_is_stuck_and_offered_no_revert(
    redis_store: RedisStore, settings: Settings, python_toolchain_dir: Path, coded_pricing: Path
) -> None:
    # The tests were green once (the best state), then the tester keeps re-running a red
    # suite unchanged: stuck. Its tests passing more is no state to go back to.
    red = [call("run_tests", timeout_s=s) for s in (30, 31, 32)]  # not the same call thrice
    turns = {1: {"content": [todolist(3), call("Write", path="tests/test_pricing.py",
                                                   content=PY_TESTS.format(last=6)),
                             call("run_tests")]},
             2: {"content": [call("Write", path="tests/test_pricing.py",
                                  content=PY_TESTS.format(last=5)), *red]},
             3: {"content": [*[call("timeline_append", kind=k, summary="t") for k in RED],
                             *all_done(3)]}}
    reassess = {"turns": {1: {"content": [{"text": "1. Finish: the code is wrong."}]}}}
    loaded = load_project(coded_pricing)
    redis_store.import_project(loaded)
    with StubServer({"sessions": {"tester.*.pricing": {"turns": turns, "default": DONE},
                                  "tester.*.pricing.reassess.*": reassess}},
                    record_bodies=True) as stub:
        llm = AnthropicProvider(api_key="test", base_url=stub.base_url, base_delay_s=0)
        request = RoleRequest(loaded.pid, "pricing", "tester", "test", 1, "run-1-1")
        run, out = run_tester(redis_store, settings, llm, request)
        asks = [r.body["messages"][0]["content"][0]["text"] for r in stub.requests
                if ".reassess." in r.session_key and r.turn == 1]
    assert len(asks) == 1, asks
    assert "the tests were red with the same failures 3 times in a row" in asks[0], asks[0]
    assert "REVERT" not in asks[0]
    assert run.session is not None and run.session.status == "completed"
    assert not out.ok  # the code is wrong: the verdict stays red
