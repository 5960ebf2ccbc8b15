"""`VitestRunner`: a node unit's tests under vitest 3; the verdict from its channel.

The verdict comes from `vitest_reporter.mjs` (devloop.runners.channel), run in vitest's
main process and checked against the exit status and the collected count; the JSON
report must name the same tests failed and passed. Failure detail comes from the errors
the reporter sends (devloop.runners.vitest_detail), the JSON report's messages failing that.

It writes into runs/{run}/ a `vitest.config.mjs` (root = the unit dir; jsdom and
@vitejs/plugin-vue only for vue units), a `devloop-setup.mjs` that records 5xx bodies and
console.error per test into the test's `meta` (so a 500's server-side stack reaches the
hint) after the read-only `vitest_guard.mjs` (which reports code that changes the
framework), and a `devloop-syntax.cjs` esbuild check, run only after a load failure because
vite's import analysis hides the real SyntaxError. Then, in the sandbox: `VERDICT_FD=<fd>
node ../../node_modules/vitest/vitest.mjs run --config runs/{run}/vitest.config.mjs
--reporter=default --reporter=json --outputFile.json=runs/{run}/report.json
--reporter=<plugins>/vitest_reporter.mjs` and coverage-v8's flags (devloop.runners.coverage).
With dependencies, their passed code is bound at /upstream: `NODE_PATH` finds `@units/<id>`
for code/'s require() and a vite alias for the tests' imports (devloop.upstream).
"""

from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path
from typing import Any

from devloop.core.models import Failure, NotRun, RunSummary
from devloop.runners import coverage as cov
from devloop.runners.base import (
    SLOT_WAIT_S,
    TIMEOUT_S,
    Parsed,
    RunOutcome,
    RunSpec,
    cache_dir_of,
    clean_stack,
    decisive_lines,
    finish,
    read_report,
    refuse_imports,
    refuse_tampering,
    tampered,
    with_source,
)
from devloop.runners.channel import (
    VITEST_GUARD,
    VITEST_REPORTER,
    Channel,
    OutputCount,
    Records,
    plugin_dir,
)
from devloop.runners.hints import build_hint
from devloop.runners.hollow import hollow_node_code
from devloop.runners.tamper import RAISED_IN_CODE
from devloop.runners.verdict import Exit, FileReport, disagreement, tally_vitest
from devloop.runners.vitest_detail import (
    Details,
    details,
    elided,
    error_text,
    hook_lead,
    hook_name,
    type_test_files,
    whole_value,
)
from devloop.safe.safedir import Dir
from devloop.safe.safetree import TooMany, walk
from devloop.sandbox import Observation, Sandbox
from devloop.sandbox.process import OutputSink
from devloop.sandbox.slots import run_slot
from devloop.upstream.mount import NODE_PATH, ROOT, Upstream
from devloop.upstream.names import NODE_SCOPE

COMMAND = (
    "NO_COLOR=1 VERDICT_FD={fd} node ../../node_modules/vitest/vitest.mjs run"
    " --config {run}/vitest.config.mjs --reporter=default --reporter=json"
    " --outputFile.json={run}/report.json --reporter={reporter}"
)
GUARD_DIR = ".devloop-verdict"  # in the run dir: where the plugin dir is bound for vite
INCLUDE = "tests/**/*.{spec,test}.{js,mjs,cjs,ts,mts,cts,jsx,tsx}"
# report.json's per-test status -> the test's outcome (pending, disabled: not run).
REPORT_OUTCOMES = {"passed": "passed", "failed": "failed", "todo": "todo"}
_SCRIPT = re.compile(r"\.[cm]?[jt]sx?$")
_SYNTAXISH = re.compile(r"SyntaxError|invalid JS syntax|Failed to parse|Transform failed")
_ASSERT = re.compile(
    r"^(?:AssertionError: )?expected (.+?) (not )?to (be|equal|strictly equal|deeply equal|"
    r"be type of|have length|contain|include|have property|match|be an instance of) "
    r"(.+?)(?: // Object\.is equality)?$"
)
# vitest 3 gives a timeout's error the stack of an Error("STACK_TRACE_ERROR") made when the
# test or hook was defined (only timeouts use it); report.json keeps that stack, not the message.
_PLACEHOLDER = "Error: STACK_TRACE_ERROR"
TIMED_OUT_UNKNOWN = "Error: Test timed out (its time limit; vitest's report gives no limit)"
_RULE = re.compile(r"^[ \t]*⎯{2,}[ \t]*(.*?)[ \t]*⎯*[ \t]*$", re.M)

CONFIG = """\
{imports}export default {{
  cacheDir: '/tmp/devloop-vite',
  plugins: [{plugins}],{upstream}
  test: {{
    root: process.cwd(), include: [{include}], environment: {environment}, globals: true,
    // forks survive native addons and process.exit; two workers keep threads under RLIMIT_NPROC
    pool: 'forks', maxWorkers: 2, minWorkers: 1, setupFiles: [{setup}],{inline}
  }},
}};
"""

# Runs in each test worker: node's http module is shared with express and supertest there.
SETUP = """\
import { writeSync } from 'node:fs';
import http from 'node:http';
import { format } from 'node:util';
import { afterEach, beforeEach } from 'vitest';
import { getFn, setFn } from 'vitest/suite';

const seen = (globalThis[Symbol.for('devloop.capture')] ??= { server: [], console: [] });
if (!seen.patched) {
  seen.patched = true;
  const end = http.ServerResponse.prototype.end;
  http.ServerResponse.prototype.end = function (chunk, ...rest) {
    if (this.statusCode >= 500 && seen.server.length < 3) {
      const body = chunk == null || typeof chunk === 'function' ? '' : String(chunk);
      seen.server.push({ status: this.statusCode, body: body.slice(0, 4000) });
    }
    return end.call(this, chunk, ...rest);
  };
  const error = console.error;
  console.error = function (...args) {
    if (seen.console.length < 3) seen.console.push(format(...args).slice(0, 2000));
    return error.apply(this, args);
  };
}
// The test that starts and ends, written at once to stderr (which goes out through the
// main process even while this worker is stuck in a loop): a killed run names its test.
const mark = (what, task) => {
  const names = [];
  for (let s = task.suite; s && s !== task.file; s = s.suite) names.unshift(s.name);
  const name = `${task.file?.name}::${[...names, task.name].join(' ')}`;
  try { writeSync(2, `\\n${what}: ${name.replace(/\\s+/g, ' ')}\\n`); } catch {}
};
beforeEach(({ task }) => {
  mark('devloop-test-started', task);
  seen.server = []; seen.console = [];
  // A hollow build does nothing only while a test's own function runs (not in hooks):
  // this file's beforeEach runs first, and the runner fetches the function after hooks.
  const fn = getFn(task);
  if (typeof fn !== 'function' || fn.devloopWrapped) return;
  const wrapped = function (...args) {
    globalThis.__devloop_in_test__ = true;
    const done = () => { globalThis.__devloop_in_test__ = false; };
    let out;
    try { out = fn.apply(this, args); } catch (e) { done(); throw e; }
    if (out && typeof out.then === 'function') return out.finally(done);
    done();
    return out;
  };
  wrapped.devloopWrapped = true;
  setFn(task, wrapped);
});
afterEach(({ task }) => {
  mark('devloop-test-ended', task);
  const { server, console: logged } = seen;
  if (server.length || logged.length) task.meta.devloop = { server, console: logged };
});
"""

SYNTAX_CHECK = """\
const fs = require('fs');
const { transformSync } = require('esbuild');
for (const file of process.argv.slice(2)) {
  const ts = /\\.[cm]?tsx?$/.test(file);
  const loader = (ts ? 'ts' : 'js') + (file.endsWith('x') ? 'x' : '');
  try { transformSync(fs.readFileSync(file, 'utf8'), { loader, sourcefile: file }); }
  catch (e) {
    for (const { text, location: at } of e.errors || []) {
      const where = at ? `${file}:${at.line}:${at.column + 1}: \\`${at.lineText.trim()}\\`` : file;
      console.log(`SyntaxError: ${text} at ${where}`);
    }
  }
}
"""


class VitestRunner:
    """Runs a node unit's vitest suite in the sandbox, node_modules bound read-only."""

    def __init__(
        self,
        sandbox: Sandbox,
        node_modules: Path,
        upstream: Upstream | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.node_modules = node_modules
        self.cache_dir = cache_dir_of(node_modules)
        plugin_dir(self.cache_dir)  # made now, not on the first run
        # The passed code of the units this one depends on, as `@units/<id>`.
        self.upstream = upstream

    @property
    def plugins(self) -> Path:
        """The verdict plugin dir, checked byte for byte against the package's at each use
        (and made again when it differs): its name alone proves nothing."""
        return plugin_dir(self.cache_dir)

    def run(
        self,
        *,
        view: Path,
        unit_id: str,
        run_id: str,
        attempt: int,
        retry_budget_left: int,
        timeout_s: float = TIMEOUT_S,
        on_output: OutputSink | None = None,
        derived: bool = False,
    ) -> RunOutcome:
        """Run `units/{unit_id}/tests/**` under vitest; see the module docstring."""
        spec = RunSpec(view, unit_id, run_id, attempt, retry_budget_left, timeout_s)
        spec.prepare()
        # A build derived from checked code (hollow, mutant) need not be checked again.
        if not derived and (
            refused := refuse_tampering(spec) or refuse_imports(spec, self.upstream)
        ):
            return refused
        # Into a dir the tests can write: whatever they planted there is replaced, never
        # followed (a link at vitest.config.mjs must not make the worker write elsewhere).
        with Dir.open(view) as root:
            guard = f"./{spec.run_rel}/{GUARD_DIR}/{VITEST_GUARD}"
            config = config_text(spec, guard, self.upstream)
            root.write_atomic(spec.run_file("vitest.config.mjs"), config, replace=True)
            root.write_atomic(spec.run_file("devloop-setup.mjs"), SETUP, replace=True)
            root.write_atomic(spec.run_file("devloop-syntax.cjs"), SYNTAX_CHECK, replace=True)
        reporter = shlex.quote(str(self.plugins / VITEST_REPORTER))
        with run_slot(self.cache_dir, max_wait_s=SLOT_WAIT_S):
            output = OutputCount(on_output)  # marks where each test's output starts
            with Channel(output) as channel:
                command = COMMAND.format(run=spec.run_rel, fd=channel.fd, reporter=reporter)
                if self.upstream is not None and self.upstream.root is not None:
                    # code/ is CommonJS: its require() finds `@units/<id>` on NODE_PATH, and
                    # the dependency's own require('express') the toolchain after it.
                    command = f"NODE_PATH={NODE_PATH}:/project/node_modules " + command
                command += "" if derived else cov.vitest_flags(spec.run_rel)
                obs = self._run(spec, command, timeout_s, channel.fd, output)
                stream = channel.close()
            parsed = Parsed()
            if not obs.timed_out:
                report = read_report(view, spec.run_file("report.json"))
                parsed = parse_report(report, obs.stderr, spec, stream.records)
                if parsed.crash_reason and _SYNTAXISH.search(parsed.crash_reason):
                    parsed.crash_reason = self._syntax_reason(spec) or parsed.crash_reason
                if parsed.crash_reason is None:
                    parsed.crash_reason = check(parsed, stream, obs.exit_code, spec)
        coverage = None if obs.timed_out or derived else cov.node_coverage(spec)
        if left := type_tests_not_run(spec):
            parsed.not_run = left
            if not obs.timed_out:  # a killed run's last output must stay the tool's own
                # Said in the run's own output too, where a person reading stdout.txt looks.
                note = f"\nDevLoop: not run: {', '.join(left.files)}: {left.reason}\n"
                obs = obs.model_copy(update={"stdout": obs.stdout + note})
        return finish(spec, parsed, obs, "vitest", tampered(stream.records), coverage, stream)

    def hollow_code(self, view: Path, unit_id: str) -> str | None:
        """Hollow code/'s scripts and .vue files of a scratch view, in the sandbox."""
        return hollow_node_code(view, unit_id, self.sandbox, self.node_modules, self.plugins)

    def _run(
        self,
        spec: RunSpec,
        command: str,
        timeout_s: float,
        channel: int | None = None,
        on_output: OutputSink | None = None,
    ) -> Observation:
        """One command in the unit dir, the toolchain bound, only the run dir writable."""
        return self.sandbox.run(
            command,
            view=spec.view,
            cwd=spec.unit_rel,
            writable=[spec.writable],
            timeout_s=timeout_s,
            # The plugin dir once more inside the unit, read-only: vite loads setup files
            # from under the root in jsdom mode too, and a mount point cannot be renamed.
            ro_binds=[
                (self.node_modules, "node_modules"),
                (self.plugins, str(self.plugins)),
                (self.plugins, f"{spec.writable}/{GUARD_DIR}"),
                *(self.upstream.binds() if self.upstream else []),
            ],
            # vite writes both at start-up; the toolchain is read-only.
            tmpfs=["node_modules/.vite-temp", "node_modules/.vite"],
            pass_fds=[] if channel is None else [channel],
            on_output=on_output,
        )

    def _syntax_reason(self, spec: RunSpec) -> str | None:
        """The real SyntaxError(s) of the unit's JS/TS files, from esbuild, or None."""
        files = [rel for rel, kind in unit_entries(spec) if kind == "file" and _SCRIPT.search(rel)]
        files = files[:200]
        if not files:
            return None
        args = " ".join(shlex.quote(f) for f in files)
        check = f"node {spec.run_rel}/devloop-syntax.cjs {args}"
        obs = self._run(spec, check, min(spec.timeout_s, 20.0))
        errors = [ln for ln in obs.stdout.splitlines() if ln.startswith("SyntaxError: ")]
        broken = re.search(r" at ([^\s:]+)", errors[0]) if errors else None
        if broken is None:
            return None
        reason = f"vitest could not load {broken.group(1)}: " + "; ".join(errors[:3])
        file = broken.group(1)
        if file.startswith("code/"):  # the code does not parse: no test can mend it
            return f"{RAISED_IN_CODE} (at {file}): {reason}"
        return reason


def check(parsed: Parsed, stream: Records, exit_code: int, spec: RunSpec) -> str | None:
    """The channel's account against the exit status, the count and report.json."""
    tally = tally_vitest(stream.records, spec.relative)
    end = tally.end or {}
    reason = end.get("reason")
    # Red with no failed test: unhandled errors, a module that did not load, a failed hook.
    errors = _count(end.get("unhandled")) + (reason == "failed") + sum(
        _count(r.get("errors")) for r in stream.records if r.get("e") == "module"
    )
    # vitest exits 1 for failed tests and for errors outside them; "interrupted" has no status.
    expected = None if reason not in ("passed", "failed") else 1 if errors else 0
    todo = {t for t, o in parsed.outcomes.items() if o == "todo"}
    report = FileReport(passed=parsed.passed, failed=parsed.failed, exact={"todo": todo})
    return disagreement(tally, stream.problems, exit_code, Exit(expected, errors), report)


def _count(value: Any) -> int:
    """A count from a record, 0 when it is not one."""
    return value if isinstance(value, int) and value > 0 else 0


def config_text(spec: RunSpec, guard: str, upstream: Upstream | None = None) -> str:
    """The vitest config for this unit: jsdom and the vue plugin only for vue units; the
    read-only tamper guard is the first setup file of every worker. With dependencies,
    `@units/<id>` resolves to their passed code, which vite transforms like code/."""
    bound = upstream is not None and upstream.root is not None
    vue = uses_vue(spec) or (bound and upstream_has_vue(upstream))
    scope = json.dumps(f"{NODE_PATH}/{NODE_SCOPE}")
    return CONFIG.format(
        imports="import vue from '@vitejs/plugin-vue';\n" if vue else "",
        plugins="vue()" if vue else "",
        upstream=f"\n  resolve: {{ alias: {{ '{NODE_SCOPE}': {scope} }} }}," if bound else "",
        inline=f"\n    server: {{ deps: {{ inline: [new RegExp({json.dumps(f'^{ROOT}/')})] }} }},"
        if bound
        else "",
        include=json.dumps(INCLUDE),
        environment=json.dumps("jsdom" if vue else "node"),
        setup=f"{json.dumps(guard)}, {json.dumps(f'./{spec.run_rel}/devloop-setup.mjs')}",
    )


# Why a unit's type tests are not run: `vitest --typecheck` runs tsc, which the toolchain lacks.
TYPECHECK_MISSING = (
    "type tests need `vitest --typecheck`, which runs the TypeScript compiler (tsc), and the "
    "node toolchain has none; their type assertions are not part of this verdict (runtime "
    "checks belong in *.test.ts / *.spec.js files)"
)


def type_tests_not_run(spec: RunSpec) -> NotRun | None:
    """The unit's type tests (`*.test-d.ts`), which this run leaves out, and why; None if none."""
    files = type_test_files([rel for rel, kind in unit_entries(spec) if kind == "file"])
    return NotRun(files=files[:20], reason=TYPECHECK_MISSING) if files else None


def upstream_has_vue(upstream: Upstream | None) -> bool:
    """Whether a dependency's code has .vue files (a component this unit mounts)."""
    present = upstream.scope.present.values() if upstream else ()
    return any(rel.endswith(".vue") for code in present for rel in code.files)


def uses_vue(spec: RunSpec) -> bool:
    """Whether the unit has .vue files (other files can opt in: `// @vitest-environment jsdom`)."""
    return any(rel.endswith(".vue") for rel, _ in unit_entries(spec))


def unit_entries(spec: RunSpec) -> list[tuple[str, str]]:
    """(unit-relative path, kind) of what is under code/ and tests/, sorted; links are not
    followed and what the walk refuses (too many, too deep, bad names) is left out."""
    found: list[tuple[str, str]] = []
    with Dir.open(spec.view) as root:
        for top in ("code", "tests"):
            rel = f"{spec.unit_rel}/{top}"
            if not root.is_dir(rel):
                continue
            try:
                found += [
                    (f"{top}/{e.rel}", e.kind) for e in walk(root, rel) if e.problem is None
                ]
            except TooMany:
                continue
    return sorted(found)


def parse_report(
    raw: str | None, stderr: str, spec: RunSpec, records: list[dict[str, Any]] | None = None
) -> Parsed:
    """vitest's JSON report -> summary, failures with hints, or a crash reason; the
    reporter's error records (`records`) give the failures their whole errors and add
    the hooks that failed."""
    if raw is None:
        found = decisive_lines(stderr)
        return Parsed(crash_reason="vitest wrote no report" + (f": {found}" if found else ""))
    try:
        data = json.loads(raw)
        files = list(data["testResults"])
    except (ValueError, KeyError, TypeError):
        return Parsed(crash_reason=f"vitest's report is not valid JSON: {raw[:200]!r}")
    if not files:
        return Parsed(crash_reason=f"vitest found no test files matching {INCLUDE}")
    sections = stderr_sections(stderr)
    detail = details(records or [], spec.relative)
    statuses, failures, load_errors = [], [], []
    outcomes: dict[str, str] = {}
    passed_names: set[str] = set()
    failed_names: set[str] = set()
    for file in files:
        name = spec.relative(str(file.get("name", "?")))
        tests = file.get("assertionResults") or []
        if not tests and file.get("status") == "failed":
            load_errors.append(_load_error(name, str(file.get("message") or ""), sections))
        statuses += [test.get("status") for test in tests]
        failures += [
            _failure(test, spec, name, detail) for test in tests if test.get("status") == "failed"
        ]
        for test in tests:
            label = f"{name}::{test.get('fullName')}"
            if test.get("status") in ("passed", "failed"):
                (passed_names if test.get("status") == "passed" else failed_names).add(label)
            outcomes[label] = REPORT_OUTCOMES.get(str(test.get("status")), "skipped")
    passed, failed = statuses.count("passed"), len(failures)
    summary = RunSummary(
        total=len(statuses), passed=passed, failed=failed, skipped=len(statuses) - passed - failed
    )
    out = Parsed(summary, failures, passed=passed_names, failed=failed_names, outcomes=outcomes)
    if load_errors:
        out.crash_reason = "; ".join(load_errors[:3])
        return out
    red = data.get("success") is False
    # Only a run vitest itself calls red has failed hooks (a test could forge the records).
    hooks = [_hook_failure(hook, spec) for hook in detail.hooks if hook["errors"]] if red else []
    if not failures and red and summary.total:
        failures += hooks or [_outside_failure(sections, spec)]
        summary.failed += 1  # counted so the run is red (no assertion failed)
        summary.total += 1
    else:
        failures += hooks  # beside the failed tests, uncounted: no test's status changed
    return out


def _failure(test: dict[str, Any], spec: RunSpec, file: str, detail: Details) -> Failure:
    """One failed test (`tests/x.test.js::suite > name`) with its expected/got, server
    errors and hint; its errors as the reporter sent them when it did, else the report's."""
    titles = [str(t) for t in test.get("ancestorTitles") or []]
    full = " > ".join([*titles, str(test.get("title") or test.get("fullName") or "?")])
    errors = detail.take(file, full)
    message = "\n".join(str(m) for m in test.get("failureMessages") or [])
    message = message.replace(_PLACEHOLDER, TIMED_OUT_UNKNOWN)  # when no error record came
    if errors:
        message = error_text(errors)
    expected, got = extract_expected_got(message)
    if errors and (elided(expected) or elided(got)):
        # The message shortened the values: vitest's error object holds them whole.
        expected, got = whole_value(errors[0], "expected"), whole_value(errors[0], "actual")
    stack = with_source(clean_stack(message + server_errors(test.get("meta") or {})), spec.unit_dir)
    name = f"{file}::{full}"
    hint = build_hint(name, expected, got, stack)
    return Failure(test=name, expected=expected, got=got, stack=stack, hint=hint)


def _hook_failure(hook: dict[str, Any], spec: RunSpec) -> Failure:
    """A suite's (or file's) beforeAll/afterAll hook that threw, as one failure."""
    stack = with_source(clean_stack(error_text(hook["errors"])), spec.unit_dir)
    name = hook_name(hook)
    hint = hook_lead(hook) + build_hint(name, None, None, stack)
    return Failure(test=name, stack=stack, hint=hint)


def _outside_failure(sections: list[tuple[str, str]], spec: RunSpec) -> Failure:
    """Errors outside any test (a failing hook, an unhandled error) as one failure."""
    outside = [b for s, b in sections if s.startswith(("Failed Suites", "Unhandled", "Uncaught"))]
    stack = with_source(clean_stack("\n".join(outside) or "vitest reported errors"), spec.unit_dir)
    name = "errors outside any test (hooks, unhandled errors)"
    return Failure(test=name, stack=stack, hint=build_hint(name, None, None, stack))


def _load_error(name: str, message: str, sections: list[tuple[str, str]]) -> str:
    """Why a test file produced no tests: the FAIL block vitest printed for it."""
    block = next((b for _, b in sections if b.startswith(f"FAIL  {name} [")), "")
    lines = [ln.strip() for ln in block.splitlines()[1:] if ln.strip()]
    detail = " ".join(lines[:4]) or message.strip().replace("\n", " ") or "no tests found"
    if message.startswith("No test found"):
        return f"{name} defines no tests ({message.strip()})"
    reason = f"vitest could not load {name}: {detail[:600]}"
    frame = _innermost(block)
    if frame is not None and frame.startswith("code/"):
        # Raised in code/ as the tests loaded it (a require that fails, a throw at load,
        # code vite cannot parse): the coder's, since no change to the tests can mend it.
        return f"{RAISED_IN_CODE} (at {frame}): {reason}"
    return reason


_FRAME = re.compile(r"^\s*❯ (\S+:\d+:\d+)")
_TRANSFORMED = re.compile(r"^\s*File: /project/units/[^/\s]+/(\S+:\d+:\d+)")


def _innermost(block: str) -> str | None:
    """The innermost frame of ours in a FAIL block, unit-relative: the file vite could not
    transform, else the first frame outside node_modules (vitest lists innermost first)."""
    lines = block.splitlines()
    for line in lines:
        if found := _TRANSFORMED.match(line):
            return found.group(1)
    for line in lines:
        found = _FRAME.match(line)
        if found and not found.group(1).startswith(("../", "node_modules/")):
            return found.group(1)
    return None


def stderr_sections(stderr: str) -> list[tuple[str, str]]:
    """vitest's stderr cut at its ⎯⎯ rules: (section title, block text) pairs."""
    parts = _RULE.split(stderr)  # text, title, text, title, text ...
    out, title = [], ""
    for i in range(0, len(parts), 2):
        head = parts[i - 1] if i else ""
        title = head if head and not head.startswith("[") else title
        if parts[i].strip():
            out.append((title, parts[i].strip()))
    return out


def server_errors(meta: dict[str, Any]) -> str:
    """What devloop-setup.mjs recorded for a test: 5xx bodies (as text) and console.error."""
    seen = meta.get("devloop") or {}
    parts = []
    for item in seen.get("server") or []:
        body = str(item.get("body", ""))
        pre = re.search(r"<pre>(.*?)</pre>", body, re.S)  # express's default error page
        text = pre.group(1).replace("<br>", "\n") if pre else body
        text = html.unescape(text).replace("\xa0", " ")
        parts.append(f"server answered {item.get('status')} during this test:\n{text.strip()}")
    for line in seen.get("console") or []:
        parts.append(f"console.error during this test:\n{str(line).strip()}")
    return "".join(f"\n\n{p}" for p in parts)


def extract_expected_got(message: str) -> tuple[Any, Any]:
    """(expected, got) from "expected 500 to be 400" or "Expected: ... Received: ..."."""
    if m := _ASSERT.match((message.strip().splitlines() or [""])[0]):
        got, negated, verb, expected = m.group(1), m.group(2), m.group(3), m.group(4)
        if verb in ("be", "equal", "strictly equal", "deeply equal") and not negated:
            return js_literal(expected), js_literal(got)
        return f"{'not ' if negated else ''}to {verb} {expected}", js_literal(got)
    exp, got_ = (re.search(rf"^\s*{w}:?\s+(.+)$", message, re.M) for w in ("Expected", "Received"))
    return (js_literal(exp.group(1)) if exp else None, js_literal(got_.group(1)) if got_ else None)


def js_literal(text: str) -> Any:
    """A number, boolean or quoted string as a value; anything else as vitest printed it."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        return text[1:-1]
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, int | float | bool) else text
