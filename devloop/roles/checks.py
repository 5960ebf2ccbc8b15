"""The runtime's own self-checks: run when a model says it is done, never trusted to it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

from devloop.agent.spec import CheckReport
from devloop.agent.tools import ToolContext
from devloop.core.contracts import contract_bridge
from devloop.core.errors import CheckInterrupted
from devloop.core.models import Adequacy, RunResult
from devloop.roles import adequacy, derive, verify
from devloop.roles import coverage as cov
from devloop.roles.coder_tools import read_contract
from devloop.roles.services import RoleServices
from devloop.roles.workspace import Workspace
from devloop.runners import excerpt, tamper
from devloop.runners.base import code_sources
from devloop.runners.coverage import unexecuted_problems
from devloop.runners.hints import is_useful_hint
from devloop.safe.safedir import Dir
from devloop.safe.safetree import Limits, TooMany, walk
from devloop.sandbox import Observation

JS = (".js", ".cjs", ".mjs")
# A vite build that writes nothing: the fe stack's "dry run" syntax check.
VITE_DRY_RUN = """\
import vue from '/project/node_modules/@vitejs/plugin-vue/dist/index.mjs';
export default {
  root: process.cwd(), logLevel: 'warn', plugins: [vue()],
  build: { write: false, emptyOutDir: false,
    lib: { entry: process.env.DEVLOOP_ENTRY, formats: ['es'], fileName: 'check' },
    rollupOptions: { external: [/^[^./]/] } },
};
"""


# What the checks read of a unit: the workspace's default limits (it reports what is past
# them as violations), and at most this much test source in all.
LIMITS = Limits()
SOURCE_BUDGET = 16 * 1024 * 1024


def unit_files(unit_dir: Path, top: str) -> list[str]:
    """Unit-relative paths of the regular files under `top`, sorted (links, fifos and
    whatever the walk refuses are left out; the workspace reports those)."""
    try:
        with Dir.open(unit_dir) as unit:
            if not unit.is_dir(top):
                return []
            found = [f"{top}/{e.rel}" for e in walk(unit, top, LIMITS) if e.kind == "file"]
    except (TooMany, OSError):
        return []
    return sorted(found)


def code_files(unit_dir: Path, suffixes: tuple[str, ...]) -> list[str]:
    """Unit-relative paths under code/ with one of the suffixes, sorted."""
    return [f for f in unit_files(unit_dir, "code") if PurePosixPath(f).suffix in suffixes]


def syntax_command(unit_dir: Path, stack: str, kind: str) -> str | None:
    """The stack's syntax check over the unit's code, as one shell command (None: no code)."""
    if stack == "python":
        files = code_files(unit_dir, (".py",))
        if not files:
            return None
        # py_compile, with the bytecode thrown away: code/ must stay what the coder wrote.
        return (
            "python -c 'import py_compile, sys\nfor f in sys.argv[1:]: "
            'py_compile.compile(f, cfile="/tmp/check.pyc", doraise=True)\' '
            + " ".join(shlex.quote(f) for f in files)
        )
    if kind == "fe":
        entries = code_files(unit_dir, (".vue",)) + code_files(unit_dir, JS)
        if not entries:
            return None
        config = shlex.quote(VITE_DRY_RUN)
        return f"printf %s {config} > /tmp/vite.check.mjs && " + " && ".join(
            f"DEVLOOP_ENTRY={shlex.quote(e)} node /project/node_modules/vite/bin/vite.js "
            "build --config /tmp/vite.check.mjs"
            for e in entries
        )
    files = code_files(unit_dir, JS)
    return " && ".join(f"node --check {shlex.quote(f)}" for f in files) or None


def coder_checks(ctx: ToolContext, ws: Workspace, stack: str, kind: str) -> CheckReport:
    """The coder's checks, each the seed's item over facts. The work's (contract, code that
    reaches into the test framework, imports of other units that are not there, syntax,
    sandbox, and in a retry no regression against the baseline) fail the session; what
    only the model can give (its coder.log decision, its plan and the items it left open)
    is owed. The timeline's unit_coded/code_patched is the runtime's, from the commit
    (derive.record_commit). Each item is a sentence the model can act on."""
    role: RoleServices = ctx.services["role"]
    failures = []
    bridge = contract_bridge(role.units, role.unit_id, read_contract(ctx))
    if not bridge.ok:
        failures.append(
            f"contract_bridge: {bridge.reason} (expected {bridge.expected}, "
            f"actual {bridge.actual}); {bridge.hint or ''}".rstrip("; ")
        )
    sources = code_sources(ctx.view, ctx.unit_rel)
    failures += [
        f"{finding} (the runtime will not run tests over such code)"
        for finding in tamper.findings(sources)
    ][:5]
    if role.upstream is not None:
        failures += [
            f"{problem} (the runtime will not run tests over such code)"
            for problem in role.upstream.problems(sources)
        ][:5]
    command = syntax_command(ctx.unit_dir, stack, kind)
    if command is None:
        failures.append("code/ has no source files to check")
    elif ctx.sandbox is not None:
        obs = ctx.sandbox.run(
            command,
            view=ctx.view,
            cwd=ctx.unit_rel,
            writable=[],
            timeout_s=120,
            ro_binds=ctx.ro_binds,
            tmpfs=ctx.tmpfs,
        )
        failures += syntax_problems(obs)
    failures += violation_problems(ws)
    owed = decision_owed(ctx, role.attempt, retry=role.mode != "implement")
    owed += todo_owed(ctx, role)
    if verify.needs_workflow(role):
        missing = verify.missing_workflow([i["title"] for i in role.todo])
        if role.todo and missing:
            owed.append(
                f"the todolist states no {', '.join(missing)} line: add items titled like "
                f"{verify.WORKFLOW_TEMPLATE}"
            )
        failures += regression_problems(ctx, role)
    return CheckReport(failures, owed)


def syntax_problems(obs: Observation) -> list[str]:
    """The syntax check's verdict. A check killed by a signal (the worker shutting down)
    says nothing about the code: handing it back would cost the model a round trip over
    nothing, so it raises, and the step runs again from its checkpoint."""
    if obs.exit_code == 0:
        return []
    if obs.exit_code > 128 and not obs.timed_out:
        raise CheckInterrupted(f"the syntax check was killed by signal {obs.exit_code - 128}")
    return ["syntax check failed: " + (obs.stderr or obs.stdout).strip()[-1500:]]


def regression_problems(ctx: ToolContext, role: RoleServices) -> list[str]:
    """DONE WHEN: no test that passed in the baseline fails now. The last verify run counts
    when nothing changed since; otherwise the runtime runs the tests itself."""
    last = role.last_verify
    if last is not None and last["fingerprint"] == verify.code_digest(ctx):
        now: RunResult | None = RunResult.model_validate(last["result"])
    else:
        now = verify.run_existing_tests(ctx)
    if now is None or role.baseline is None:
        return []
    c = verify.compare(role.baseline, now)
    problems = []
    if c.regressed:
        problems.append(
            f"tests that passed in the baseline fail now: {', '.join(c.regressed[:5])}; "
            "DONE WHEN says nothing that passed in the baseline fails (verify_tests shows "
            "each with its hint)"
        )
    if c.crashed:
        problems.append(
            f"the tests no longer run against your code ({c.crashed[:300]}), and "
            f"{role.baseline.summary.passed} passed in the baseline"
        )
    return problems


def violation_problems(ws: Workspace) -> list[str]:
    """Writes outside the write set, files that are not source (artifacts.py), and changes
    to files only their tools write (each discarded: what is committed is the tool's copy)."""
    violations = ws.collect().violations
    artifacts = [str(v) for v in violations if v.artifact]
    outside = [str(v) for v in violations if v.owner is None and not v.artifact]
    owned = [str(v) for v in violations if v.owner is not None]
    problems = ["writes outside your write set: " + "; ".join(outside)] if outside else []
    if artifacts:
        problems.append("files that are not source, never committed (your unit holds source "
                        "only; delete them, or write what they meant as text): "
                        + "; ".join(artifacts))
    if owned:
        problems.append("changes to files only their tools write: " + "; ".join(owned))
    return problems


def decision_owed(ctx: ToolContext, attempt: int, retry: bool = True) -> list[str]:
    """The coder's decision for this attempt, as append_coder_log wrote it (never the
    view's file, which the session may edit): its narrative is the model's to give."""
    mine = [d for d in derive.logged(ctx) if d.attempt == attempt]
    reflects = retry and attempt > 1
    fields = "last_failure, last_cause, this_fix and rationale" if reflects else (
        "this_fix and rationale"
    )
    if not mine:
        return [
            f"coder.log has no entry for attempt {attempt}: call append_coder_log with "
            f"{fields} (attempt, ts and changed_files are filled in for you)"
        ]
    last = mine[-1]
    if reflects and not (last.last_failure and last.last_cause and last.this_fix):
        return ["the retry entry in coder.log needs last_failure, last_cause and this_fix: "
                "call append_coder_log again"]
    return []


def todo_owed(ctx: ToolContext, role: RoleServices) -> list[str]:
    """The plan is the model's; an item whose output exists the runtime marks done itself
    (derive.mark_done), so only the items it cannot judge are asked for, by id."""
    if not role.todo:
        return ["no todolist: call write_todolist with your plan"]
    derive.mark_done(ctx, role)
    open_items = [i for i in role.todo if i["status"] not in ("done", "skipped")]
    if not open_items:
        return []
    ids = ", ".join(i["id"] for i in open_items)
    named = "; ".join(f"{i['id']} {i['title'][:60]!r}" for i in open_items[:8])
    return [f"todolist items not done: {ids}: mark each with update_todo_item, done or "
            f"skipped ({named})"]


NODE_MOCK_OF_CODE = re.compile(r"\b(?:vi|jest)\.(?:mock|doMock)\(\s*['\"`]\.\./code/")


def mock_of_code(stack: str, modules: list[str]) -> re.Pattern[str]:
    """What mocking the unit's own code looks like in its tests."""
    if stack == "node":
        return NODE_MOCK_OF_CODE
    # Tests import code/x.py as `x` (code/ is on sys.path), so a mock of it names `x`, not
    # only `code.x`: patch("x.f"), patch.object(x, "f"), monkeypatch.setattr(x, "f", ...).
    names = "|".join(re.escape(m) for m in sorted({"code", *modules}))
    target = rf"(?:['\"](?:{names})\.|(?:{names})\s*,)"
    return re.compile(rf"\b(?:patch|patch\.object|monkeypatch\.setattr)\(\s*{target}")


def code_modules(unit_dir: Path) -> list[str]:
    """The top-level python modules and packages under code/ (code/x.py -> x)."""
    return sorted({f.split("/")[1].removesuffix(".py") for f in code_files(unit_dir, (".py",))})


def test_sources(unit_dir: Path) -> dict[str, str]:
    """Unit-relative path -> text of every regular file under tests/ (bounded in all)."""
    sources: dict[str, str] = {}
    budget = SOURCE_BUDGET
    try:
        with Dir.open(unit_dir) as unit:
            for rel in unit_files(unit_dir, "tests"):
                data, _ = unit.read_head(rel, budget)
                sources[rel] = data.decode("utf-8", errors="replace")
                budget -= len(data)
                if budget <= 0:
                    break
    except OSError:
        pass  # replaced by a link or fifo since the walk: what was read is what counts
    return sources


def tester_checks(
    ctx: ToolContext, ws: Workspace, stack: str, criteria: list[str], codes: list[str]
) -> CheckReport:
    """The tester's checks: a test exercising each criterion, a case per status code, no
    mock of the code, a real run with useful hints and bridged bugs, tests that fail on a
    hollow build of the code, every exported function executed by a test, no write
    outside its write set (the work's); a finished plan (owed). The timeline's
    unit_tested and verdict are the runtime's, from the run (derive.record_run)."""
    role: RoleServices = ctx.services["role"]
    failures = static_test_problems(ctx.unit_dir, stack, criteria, codes)
    failures += _run_problems(ctx, role)
    failures += adequacy.problems(last_adequacy(role))
    failures += unexecuted_problems((role.last_run or {}).get("result"))
    failures += violation_problems(ws)
    return CheckReport(failures, todo_owed(ctx, role))


def static_test_problems(
    unit_dir: Path, stack: str, criteria: list[str], codes: list[str]
) -> list[str]:
    """What the tests' source alone shows: a criterion no test exercises, a status
    code no test provokes, a mock of the code under test (checked before a zero-token
    re-run too)."""
    failures = []
    sources = test_sources(unit_dir)
    tests = cov.blocks(sources, stack)
    missing = cov.uncovered_criteria(criteria, tests)
    if missing:
        failures.append(
            "no test exercises these acceptance criteria (name each test after its "
            "criterion, or put the criterion in its docstring; a test named after several "
            "exercises only those whose values its code uses): "
            + "; ".join(f"{c!r}" for c in missing)
        )
    codes_missing = cov.uncovered_codes(codes, tests)
    if codes_missing:
        failures.append(
            f"no test provokes and checks status {', '.join(codes_missing)}: write a case "
            "per status code the contract declares (for an error status, the negative case "
            "that gets it)"
        )
    mock = mock_of_code(stack, code_modules(unit_dir) if stack == "python" else [])
    mocked = [p for p, t in sources.items() if mock.search(t)]
    if mocked:
        failures.append(f"{', '.join(mocked)} mock the module under test: test the real code")
    return failures


def code_names(ctx: ToolContext) -> set[str]:
    """The names code/ exports (files, functions, classes, methods): what hints name."""
    found: set[str] = set()
    for line in excerpt.code_exports(ctx.files, ctx.unit_rel):
        found.update(re.findall(r"[A-Za-z_$][\w$]*", line))
    return found - {"code", "class", "no", "exports", "found", "does", "not", "parse"}


def last_adequacy(role: RoleServices) -> Adequacy | None:
    """What the hollow run of the session's last green run found (None: not measured)."""
    if role.last_run is None:
        return None
    return RunResult.model_validate(role.last_run["result"]).adequacy


def _run_problems(ctx: ToolContext, role: RoleServices) -> list[str]:
    if role.last_run is None:
        return ["no test run for this attempt: call run_tests"]
    # The runtime's own result (run_tests, set_hint, bug_open), never the file in the view.
    result = RunResult.model_validate(role.last_run["result"])
    names = code_names(ctx)
    problems = [
        f"failure {f.test!r} needs a hint that says what to change and where, naming the "
        "code (file, function or route) or the value that must change (not generic, not "
        "only expected and got, not the test's name, not hint_builder's fallback draft): "
        "give it with set_hint"
        for f in result.failures
        if not is_useful_hint(f.hint, f.test, f.expected, f.got, names)
    ]
    problems += [
        f"failure {f.test!r} is not bridged to a bug: call bug_open"
        for f in result.failures
        if not f.bug_id
    ]
    return problems
