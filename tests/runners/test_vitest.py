"""VitestRunner against real vitest 3 in the real bubblewrap sandbox."""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from devloop.core.models import RunResult
from devloop.runners import RunOutcome, VitestRunner, is_useful_hint
from devloop.runners.base import RunSpec
from devloop.runners.tamper import RAISED_IN_CODE
from devloop.runners.timing import is_timeout
from devloop.runners.vitest import TIMED_OUT_UNKNOWN, extract_expected_got, parse_report
from devloop.runners.vitest_detail import VALUE_CAP
from devloop.sandbox import BwrapSandbox

RUN = "run-1"
MakeView = Callable[[str], Path]  # the make_view fixture (conftest.py)


@pytest.fixture(scope="module")
def runner(sandbox: BwrapSandbox, node_toolchain_dir: Path) -> VitestRunner:
    """The runner over the machine's node toolchain."""
    return VitestRunner(sandbox, node_toolchain_dir / "node_modules")


def run(runner: VitestRunner, view: Path, unit: str, timeout_s: float = 60.0) -> RunOutcome:
    """Run attempt 1 of `unit` with four retries left."""
    return runner.run(
        view=view, unit_id=unit, run_id=RUN, attempt=1, retry_budget_left=4, timeout_s=timeout_s
    )


def written(view: Path, unit: str) -> RunResult:
    """The result.json the runner wrote, checked next to stdout.txt and stderr.txt."""
    run_dir = view / "units" / unit / "runs" / RUN
    assert (run_dir / "stdout.txt").is_file() and (run_dir / "stderr.txt").is_file()
    return RunResult.model_validate_json((run_dir / "result.json").read_text())


def test_a_missing_body_field_is_one_failure_with_a_hint_naming_the_property(
    runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    out = run(runner, view, "todo-be")
    result = out.result
    assert (result.ok, result.crashed, result.next_action) == (False, False, "retry_coder")
    assert result.summary.model_dump() == {"total": 3, "passed": 2, "failed": 1, "skipped": 0}
    [failure] = result.failures
    # Named as Failure.test names are elsewhere: the file, then the suites and the test.
    assert failure.test == (
        "tests/todo-be.spec.js::POST /api/todos > answers 400 when the body has no title"
    )
    assert (failure.expected, failure.got) == (400, 500)
    # The lines the workers write as each test starts and ends (to name a hanging test)
    # are the runner's own: neither stderr.txt nor the outcome carries them.
    stderr = (view / "units/todo-be/runs" / RUN / "stderr.txt").read_text()
    assert "devloop-test-" not in stderr and "devloop-test-" not in out.stderr
    # The 500's own stack comes from the server side of the request (devloop-setup.mjs).
    assert "Cannot read properties of undefined (reading 'length')" in failure.stack
    assert "code/server.js:12" in failure.stack
    assert "`req.body.title` is undefined" in failure.hint and "`.length`" in failure.hint
    assert "400" in failure.hint and is_useful_hint(failure.hint)
    assert result.retry_budget_left == 4 and result.attempt == 1 and result.duration_ms > 0
    assert written(view, "todo-be") == result
    assert "1 failed" in out.stdout


def test_the_fixed_code_passes(runner: VitestRunner, make_view: MakeView, fixtures: Path) -> None:
    view = make_view("node/todo-be")
    shutil.copy(fixtures / "fixes/server.js", view / "units/todo-be/code/server.js")
    unit = view / "units/todo-be"
    before = _source_tree(unit)
    result = run(runner, view, "todo-be").result
    assert (result.ok, result.crashed, result.next_action) == (True, False, "none")
    assert result.summary.model_dump() == {"total": 3, "passed": 3, "failed": 0, "skipped": 0}
    assert result.failures == [] and result.stdout_tail is None
    assert written(view, "todo-be") == result
    # node and vite keep their caches off the tree (vite's on the sandbox's /tmp): nothing new
    assert _source_tree(unit) == before


def _source_tree(unit: Path) -> list[Path]:
    """Every path under a unit's code/ and tests/."""
    return sorted(p.relative_to(unit) for top in ("code", "tests") for p in (unit / top).rglob("*"))


def test_a_vue_component_mounts_under_jsdom(runner: VitestRunner, make_view: MakeView) -> None:
    view = make_view("node/todo-fe")
    out = run(runner, view, "todo-fe")
    assert out.result.ok, out.stderr
    assert out.result.summary.passed == 3
    assert (
        'environment: "jsdom"' in (view / "units/todo-fe/runs/run-1/vitest.config.mjs").read_text()
    )


def test_a_syntax_error_in_the_code_is_a_crash_quoting_it(
    runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    server = view / "units/todo-be/code/server.js"
    code = server.read_text()
    server.write_text(code + "app.get('/x', (req, res) => { res.json({ ok: 1 } });\n")
    broken_line = len(code.splitlines()) + 1
    result = run(runner, view, "todo-be").result
    # The code does not parse: the coder's to mend, never the tester's.
    assert (result.ok, result.crashed, result.next_action) == (False, True, "retry_coder")
    assert result.crash_reason is not None
    assert result.crash_reason.startswith(
        f"{RAISED_IN_CODE} (at code/server.js): vitest could not load code/server.js: "
        "SyntaxError: ")
    assert f"at code/server.js:{broken_line}:" in result.crash_reason
    assert result.failures == [] and result.stdout_tail
    assert written(view, "todo-be") == result


def test_a_missing_module_required_by_the_code_is_a_crash_for_the_coder_naming_the_require(
    runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    server = view / "units/todo-be/code/server.js"
    server.write_text("require('./db');\n" + server.read_text())
    result = run(runner, view, "todo-be").result
    # Raised in code/ as the tests loaded it: the coder's, with the code's frame.
    assert result.crashed and result.next_action == "retry_coder"
    assert result.crash_reason is not None
    assert result.crash_reason.startswith(f"{RAISED_IN_CODE} (at code/server.js:1:1): ")
    assert "vitest could not load tests/todo-be.spec.js" in result.crash_reason
    assert "Cannot find module './db'" in result.crash_reason


def test_a_missing_module_required_by_the_tests_stays_the_testers(
    runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    spec = view / "units/todo-be/tests/todo-be.spec.js"
    spec.write_text("require('./helpers');\n" + spec.read_text())
    result = run(runner, view, "todo-be").result
    assert result.crashed and result.next_action == "retry_tester"
    assert result.crash_reason is not None and not result.crash_reason.startswith(RAISED_IN_CODE)
    assert "Cannot find module './helpers'" in result.crash_reason


def test_a_suite_without_tests_is_a_crash(runner: VitestRunner, make_view: MakeView) -> None:
    view = make_view("node/todo-be")
    tests = view / "units/todo-be/tests"
    (tests / "todo-be.spec.js").write_text(
        "import { describe } from 'vitest';\ndescribe('x', () => {});\n"
    )
    result = run(runner, view, "todo-be").result
    assert result.crashed and not result.ok and result.next_action == "retry_tester"
    assert result.crash_reason == (
        "tests/todo-be.spec.js defines no tests (No test found in suite tests/todo-be.spec.js)"
    )


def test_no_test_files_is_a_crash(runner: VitestRunner, make_view: MakeView) -> None:
    view = make_view("node/todo-be")
    shutil.rmtree(view / "units/todo-be/tests")
    result = run(runner, view, "todo-be").result
    assert result.crashed and result.summary.total == 0
    assert result.crash_reason is not None and "no test files" in result.crash_reason


def test_a_hanging_test_is_killed_at_the_limit(runner: VitestRunner, make_view: MakeView) -> None:
    view = make_view("node/todo-be")
    (view / "units/todo-be/tests/todo-be.spec.js").write_text(
        "import { it } from 'vitest';\nit('waits forever', () => new Promise(() => {}), 600_000);\n"
    )
    started = time.monotonic()
    # 5 s: vitest's start with coverage-v8 takes a CPU second; with less, idle looks busy.
    out = run(runner, view, "todo-be", timeout_s=5)
    assert time.monotonic() - started < 5 + 30  # the limit, plus slack for a loaded machine
    assert out.timed_out and out.result.crashed and out.result.next_action == "retry_tester"
    assert out.result.crash_reason is not None
    assert out.result.crash_reason.startswith("vitest passed the 5 s limit and was killed")
    assert written(view, "todo-be") == out.result


def test_errors_outside_any_test_make_the_run_red(
    runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    (view / "units/todo-be/tests/todo-be.spec.js").write_text(
        "import { beforeAll, describe, it, expect } from 'vitest';\n"
        "it('passes', () => expect(1).toBe(1));\n"
        "describe('broken setup', () => {\n"
        "  beforeAll(() => { throw new Error('seed failed'); });\n"
        "  it('never runs', () => expect(1).toBe(1));\n"
        "});\n"
    )
    result = run(runner, view, "todo-be").result
    assert not result.ok and not result.crashed and result.next_action == "retry_coder"
    [failure] = result.failures
    assert failure.test == "tests/todo-be.spec.js::broken setup > beforeAll hook"
    assert "seed failed" in failure.stack and is_useful_hint(failure.hint)


def spec_run(runner: VitestRunner, make_view: MakeView, spec: str) -> tuple[RunResult, Path]:
    """Run todo-be with `spec` as its only test file; the result and the view."""
    view = make_view("node/todo-be")
    (view / "units/todo-be/tests/todo-be.spec.js").write_text(spec)
    out = run(runner, view, "todo-be")
    assert written(view, "todo-be") == out.result
    return out.result, view


def test_vitest3s_own_test_timeout_says_it_timed_out_after_its_limit(
    runner: VitestRunner, make_view: MakeView
) -> None:
    # vitest 3's JSON report gives this test's error as "Error: STACK_TRACE_ERROR" (the stack
    # of the error made when the test was defined); its error object says the truth.
    result, view = spec_run(runner, make_view, (
        "import { it, expect } from 'vitest';\n"
        "it('passes', () => expect(1).toBe(1));\n"
        "it('waits forever', async () => { await new Promise(() => {}); }, 200);\n"
        # A real failure too: a run red only on timeouts on a busy machine is starved.
        "it('fails', () => expect(1).toBe(2));\n"
    ))
    assert not result.crashed and result.next_action == "retry_coder"
    assert result.summary.model_dump() == {"total": 3, "passed": 1, "failed": 2, "skipped": 0}
    [failure, _] = result.failures
    assert failure.test == "tests/todo-be.spec.js::waits forever"
    assert failure.stack.startswith("Error: Test timed out in 200ms.")
    assert "tests/todo-be.spec.js:3" in failure.stack  # where the test is defined
    assert "STACK_TRACE_ERROR" not in failure.stack + failure.hint
    assert "timed out after 200 ms (its own time limit)" in failure.hint
    assert is_useful_hint(failure.hint) and is_timeout(failure)
    # Without the reporter's error record (its detail budget spent), the same run's own
    # report.json still reads as a timeout, never as STACK_TRACE_ERROR.
    spec = RunSpec(view, "todo-be", RUN, 1, 4)
    report = (view / "units/todo-be/runs/run-1/report.json").read_text()
    [fallback, _] = parse_report(report, "", spec).failures
    assert fallback.stack.startswith(TIMED_OUT_UNKNOWN)
    assert "STACK_TRACE_ERROR" not in fallback.stack
    assert "timed out" in fallback.hint and "STACK_TRACE_ERROR" not in fallback.hint


def test_failed_before_all_and_after_all_hooks_are_failures_beside_failed_tests(
    runner: VitestRunner, make_view: MakeView
) -> None:
    result, _ = spec_run(runner, make_view, (
        "import { afterAll, beforeAll, describe, it, expect } from 'vitest';\n"
        "it('fails', () => expect(1).toBe(2));\n"
        "describe('seeded', () => {\n"
        "  beforeAll(() => { throw new Error('seed failed'); });\n"
        "  it('never runs', () => expect(1).toBe(1));\n"
        "});\n"
        "describe('cleaned', () => {\n"
        "  afterAll(() => { throw new Error('clean-up failed'); });\n"
        "  it('runs', () => expect(1).toBe(1));\n"
        "});\n"
        "describe('slow seed', () => {\n"
        "  beforeAll(() => new Promise(() => {}), 200);\n"
        "  it('waits', () => expect(1).toBe(1));\n"
        "});\n"
        "afterAll(() => { throw new Error('file clean-up failed'); });\n"
    ))
    assert not result.crashed and result.next_action == "retry_coder"
    # The hooks are reported, not counted: each test keeps the status vitest gave it.
    assert result.summary.model_dump() == {"total": 4, "passed": 1, "failed": 1, "skipped": 2}
    failures = {f.test: f for f in result.failures}
    file = "tests/todo-be.spec.js"
    assert sorted(failures) == sorted([
        f"{file}::fails",
        f"{file}::seeded > beforeAll hook",
        f"{file}::cleaned > afterAll hook",
        f"{file}::slow seed > beforeAll hook",
        f"{file}::afterAll hook",
    ])
    seeded = failures[f"{file}::seeded > beforeAll hook"]
    assert seeded.stack.startswith("Error: seed failed") and f"{file}:4" in seeded.stack
    assert seeded.hint.startswith("The beforeAll hook of suite `seeded` threw, so its tests ")
    cleaned = failures[f"{file}::cleaned > afterAll hook"]
    assert "clean-up failed" in cleaned.stack and "afterAll hook of suite `cleaned`" in cleaned.hint
    slow = failures[f"{file}::slow seed > beforeAll hook"]
    assert slow.stack.startswith("Error: Hook timed out in 200ms.")
    assert "timed out after 200 ms (a hook's time limit)" in slow.hint
    assert "file clean-up failed" in failures[f"{file}::afterAll hook"].stack
    assert all(is_useful_hint(f.hint) for f in result.failures if f.test.endswith(" hook"))


def test_nested_values_are_kept_whole_and_long_ones_capped_saying_so(
    runner: VitestRunner, make_view: MakeView
) -> None:
    result, _ = spec_run(runner, make_view, (
        "import { describe, it, expect } from 'vitest';\n"
        "describe('outer', () => { describe('inner', () => {\n"
        "  it('nested', () => expect({ items: [{ a: 1, b: [1, 2] }, { c: 'x' }] })"
        ".toEqual({ items: [{ a: 1, b: [1, 3] }, { c: 'y' }] }));\n"
        "}); });\n"
        "it('long', () => expect(Array.from({ length: 3000 }, (_, i) => i))"
        ".toEqual([-1]));\n"
    ))
    failures = {f.test: f for f in result.failures}
    nested = failures["tests/todo-be.spec.js::outer > inner > nested"]
    # The message reads `{ items: [ …(2) ] }` for both; vitest's error object has them whole.
    assert nested.expected == {"items": [{"a": 1, "b": [1, 3]}, {"c": "y"}]}
    assert nested.got == {"items": [{"a": 1, "b": [1, 2]}, {"c": "x"}]}
    assert '-       "c": "y",\n+       "c": "x",' in nested.stack  # vitest's own diff
    long = failures["tests/todo-be.spec.js::long"]
    assert long.expected == [-1]
    assert isinstance(long.got, str) and long.got.startswith("Array [\n  0,\n  1,")
    cut = re.search(r" … \[cut: the first (\d+) of (\d+) characters\]$", long.got)
    assert cut is not None and int(cut.group(1)) == VALUE_CAP < int(cut.group(2))
    assert len(long.got) < VALUE_CAP + 60


def test_type_tests_are_reported_as_not_run_with_why(
    runner: VitestRunner, make_view: MakeView, fixtures: Path
) -> None:
    view = make_view("node/todo-be")
    shutil.copy(fixtures / "fixes/server.js", view / "units/todo-be/code/server.js")
    (view / "units/todo-be/tests/types.test-d.ts").write_text(
        "import { expectTypeOf, test } from 'vitest';\n"
        "test('types', () => { expectTypeOf(1).toEqualTypeOf<string>(); });\n"
    )
    out = run(runner, view, "todo-be")
    result = out.result
    # The runtime tests decide the verdict; the type tests are named as left out, and why.
    assert result.ok and result.summary.total == 3
    assert result.not_run is not None and result.not_run.files == ["tests/types.test-d.ts"]
    assert "TypeScript compiler (tsc)" in result.not_run.reason
    assert written(view, "todo-be") == result
    stdout = (view / "units/todo-be/runs/run-1/stdout.txt").read_text()
    assert "DevLoop: not run: tests/types.test-d.ts: type tests need `vitest --typecheck`" in stdout
    raw = json.loads((view / "units/todo-be/runs/run-1/result.json").read_text())
    assert raw["not_run"]["files"] == ["tests/types.test-d.ts"]


def test_a_symlink_planted_at_result_json_is_replaced_not_followed(
    runner: VitestRunner, make_view: MakeView, fixtures: Path
) -> None:
    view = make_view("node/todo-be")
    shutil.copy(fixtures / "fixes/server.js", view / "units/todo-be/code/server.js")
    (view / "units/todo-be/tests/plant.spec.js").write_text(
        "import { symlinkSync } from 'node:fs';\nimport { it } from 'vitest';\n"
        "it('plants', () => symlinkSync('../../code/server.js', 'runs/run-1/result.json'));\n"
    )
    before = (view / "units/todo-be/code/server.js").read_text()
    result = run(runner, view, "todo-be").result
    assert result.ok
    assert (view / "units/todo-be/code/server.js").read_text() == before
    assert not (view / "units/todo-be/runs/run-1/result.json").is_symlink()


def test_a_varied_passing_suite_is_green_on_every_account(
    runner: VitestRunner, make_view: MakeView
) -> None:
    # Skips, todos, each, skipped suites and two tests of one name: the channel, the exit
    # status and report.json must agree on all of them.
    view = make_view("node/todo-be")
    (view / "units/todo-be/tests/todo-be.spec.js").write_text(
        "import { describe, it, expect } from 'vitest';\n"
        "it('passes', () => expect(1).toBe(1));\n"
        "it.skip('is skipped', () => expect(1).toBe(2));\n"
        "it.todo('is to do');\n"
        "describe('a suite', () => {\n"
        "  it.each([1, 2])('case %i', (n) => expect(n).toBeGreaterThan(0));\n"
        "  it('twice', () => expect(2).toBe(2));\n"
        "  it('twice', () => expect(2).toBe(2));\n"
        "});\n"
        "describe.skip('skipped suite', () => { it('never', () => expect(1).toBe(2)); });\n"
    )
    out = run(runner, view, "todo-be")
    assert out.exit_code == 0 and out.result.ok, out.result.crash_reason
    assert out.result.summary.model_dump() == {"total": 8, "passed": 5, "failed": 0, "skipped": 3}


# --- the verdict nobody can forge ----------------------------------------------------

GREEN_REPORT = {
    "success": True,
    "numTotalTests": 3,
    "numPassedTests": 3,
    "numFailedTests": 0,
    "testResults": [
        {
            "name": "/project/units/todo-be/tests/todo-be.spec.js",
            "status": "passed",
            "message": "",
            "assertionResults": [
                {"fullName": f"POST /api/todos {title}", "status": "passed", "title": title,
                 "failureMessages": []}
                for title in (
                    "creates a todo that GET lists",
                    "answers 400 title_required for an empty title",
                    "answers 400 when the body has no title",
                )
            ],
        }
    ],
}


def test_a_suite_that_writes_a_green_report_and_kills_vitest_is_a_crash_not_a_pass(
    runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    forged = json.dumps(GREEN_REPORT)
    (view / "units/todo-be/tests/zz-forge.spec.js").write_text(
        "import { writeFileSync } from 'node:fs';\nimport { afterAll, it } from 'vitest';\n"
        "it('does nothing', () => {});\n"
        "afterAll(async () => {\n"
        "  await new Promise((done) => setTimeout(done, 500));\n"
        f"  writeFileSync('runs/run-1/report.json', {json.dumps(forged)});\n"
        "  process.kill(process.ppid, 'SIGKILL');\n"
        "});\n"
    )
    out = run(runner, view, "todo-be")
    assert out.exit_code == 137  # vitest's main process was killed
    assert (view / "units/todo-be/runs/run-1/report.json").read_text() == forged
    result = out.result
    assert not result.ok and result.crashed and result.next_action == "retry_tester"
    assert result.crash_reason == (
        "report and exit status disagree: the runner sent no final record and exited "
        "with status 137"
    )
    assert written(view, "todo-be") == result


def test_lines_a_test_writes_into_the_channel_cannot_turn_a_red_run_green(
    runner: VitestRunner, make_view: MakeView
) -> None:
    view = make_view("node/todo-be")
    # A failing test reports itself passed, and the whole run green, through every way it
    # might reach the channel: the fd number it inherited (node's workers do not keep
    # it), and the main process's fd reopened through /proc (refused when the worker is
    # root and the sandbox is not; possible when both run as one user).
    (view / "units/todo-be/tests/todo-be.spec.js").write_text(
        "import { openSync, writeSync } from 'node:fs';\nimport { it, expect } from 'vitest';\n"
        "const fd = Number(process.env.VERDICT_FD);\n"
        "const ways = [() => fd, () => openSync(`/proc/${process.ppid}/fd/${fd}`, 'w')];\n"
        "it('fails', ({ task }) => {\n"
        "  const lines = [\n"
        "    { e: 'test', id: task.id, module: task.file.filepath, name: task.name,"
        " outcome: 'passed' },\n"
        "    { e: 'end', reason: 'passed', modules: 1, unhandled: 0 },\n"
        "  ].map((r) => JSON.stringify(r) + '\\n').join('');\n"
        "  for (const way of ways) { try { writeSync(way(), lines); } catch {} }\n"
        "  expect(1).toBe(2);\n"
        "});\n"
    )
    out = run(runner, view, "todo-be")
    result = out.result
    assert out.exit_code == 1 and not result.ok
    if result.crashed:  # the lines got through, and were caught
        assert result.crash_reason is not None
        assert result.crash_reason.startswith("report and exit status disagree: ")
    else:  # they could not get through: the run is red on its own failure
        assert [f.test for f in result.failures] == ["tests/todo-be.spec.js::fails"]


def test_links_planted_where_the_runner_writes_its_files_are_replaced_not_followed(
    runner: VitestRunner, make_view: MakeView, fixtures: Path, tmp_path: Path
) -> None:
    view = make_view("node/todo-be")
    shutil.copy(fixtures / "fixes/server.js", view / "units/todo-be/code/server.js")
    host = tmp_path / "host"
    host.mkdir()
    (host / "existing").write_text("host file\n")
    run_dir = view / "units/todo-be/runs" / RUN
    run_dir.mkdir(parents=True)
    # What an earlier Bash command of the tester session could leave in its write set.
    (run_dir / "vitest.config.mjs").symlink_to(host / "existing")
    (run_dir / "devloop-setup.mjs").symlink_to(host / "created-by-the-worker")
    (run_dir / "devloop-syntax.cjs").symlink_to(host)
    (run_dir / "stdout.txt").symlink_to(host / "stdout")
    result = run(runner, view, "todo-be").result
    assert result.ok, result.crash_reason
    assert sorted(p.name for p in host.iterdir()) == ["existing"]
    assert (host / "existing").read_text() == "host file\n"
    for name in ("vitest.config.mjs", "devloop-setup.mjs", "devloop-syntax.cjs", "stdout.txt"):
        assert (run_dir / name).is_file() and not (run_dir / name).is_symlink(), name


@pytest.mark.parametrize(
    ("message", "expected", "got"),
    [
        ("AssertionError: expected 500 to be 400 // Object.is equality", 400, 500),
        ("AssertionError: expected 'a' to deeply equal 'b'", "b", "a"),
        ("AssertionError: expected true to be false", False, True),
        ("AssertionError: expected [ 1 ] to include 2", "to include 2", "[ 1 ]"),
        ("AssertionError: expected 3 not to be 3", "not to be 3", 3),
        ("Error: boom\nExpected: 401\nReceived: 500", 401, 500),
        ("TypeError: x is not a function", None, None),
    ],
)
def test_expected_and_got_come_from_vitest_messages(
    message: str, expected: object, got: object
) -> None:
    assert extract_expected_got(message) == (expected, got)
