"""Round trips to green: a retry-heavy project run on the code before issue 15 and on this code.

Twelve python units whose first attempt fails (bench/_loop_units.py: five plain bugs,
four whose first fix breaks a test that passed, three where the coder keeps tweaking
around the bug) run to green through the library's own steps (coder -> tester -> decide,
as Celery would chain them, in one process), with real sandboxes and real pytest, against
the stub server. The "before" run imports the code of BEFORE_REF (extracted from git into
a temporary dir); the "after" run imports this worktree's.

The model is scripted, so each run's turns are the turns a model following that version's
prompt would take given what it sees (the runs are deterministic): before, there is no
verify_tests, so a fix that breaks another test is found by the tester's next run (one more
chain), and the tweaking coder goes on for its seven tweaks because its errors differ in an
address each time; after, verify_tests shows the regression in the same session, and stuck
detection (the same error once addresses are normalised out) hands the turn to reassess
after three, whose plan the coder then follows. What differs is measured, not assumed: model
calls (reassess included), tokens, chains and wall time per green unit.

Prints a table and writes bench/out/loop.json.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _loop_units import UNITS, Unit

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out" / "loop.json"
BEFORE_REF = "f112800"  # main when issue 15 began
PID = "p-loop"
IMPLEMENT = ("Read spec.json", "Write code/", "Write contract.json", "Log the decision")
RETRY_BEFORE = ("Read the failures and hints", "Reflect on the cause", "Patch code/", "Log it")
RETRY_AFTER = (
    "BASELINE: what the runtime's run before the first edit shows",
    "VERIFY: verify_tests after each change",
    "DONE WHEN: the failing tests pass and nothing that passed in the baseline fails",
    "Patch code/",
    "Log it",
)
TESTER = ("Write one test per acceptance criterion", "Run the tests", "Timeline")


# --- the project and its script (identical for both runs but for what the model can use) --


def contract(u: Unit) -> dict[str, Any]:
    module = {f"code/{u.module}.py": {u.signature: u.returns}}
    return {"exports": {"module": module}, "consumes": []}


def build_project(root: Path, hash_contract: Any) -> Path:
    """units.json and the SDD (spec.json is derived from it)."""
    root.mkdir(parents=True)
    units = [
        {"id": u.id, "kind": "lib", "depends_on": [], "contract_hash": hash_contract(contract(u))}
        for u in UNITS
    ]
    doc = {"company_id": "c-bench", "project_id": PID, "stack": "python", "units": units}
    (root / "units.json").write_text(json.dumps(doc, indent=2))
    sections = "".join(
        f'<section data-unit-id="{u.id}"><h2>{u.id}</h2><pre data-contract>'
        f"{html.escape(json.dumps(contract(u)))}</pre><ul data-acceptance>"
        + "".join(f"<li>{html.escape(c)}</li>" for c in u.criteria)
        + "</ul></section>\n"
        for u in UNITS
    )
    (root / "sdd" / "mvcp").mkdir(parents=True)
    (root / "sdd" / "mvcp" / "units.html").write_text(f"<html><body>{sections}</body></html>\n")
    return root


def use(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_use": {"name": name, "input": args}}


def turn(*blocks: dict[str, Any], latency: int) -> dict[str, Any]:
    out: dict[str, Any] = {"content": list(blocks)}
    if latency:
        out["latency_ms"] = latency
    return out


def plan(items: tuple[str, ...]) -> dict[str, Any]:
    return use("write_todolist", items=[{"id": f"s{i}", "title": t} for i, t in enumerate(items)])


def done(items: tuple[str, ...]) -> list[dict[str, Any]]:
    return [use("update_todo_item", id=f"s{i}", status="done") for i in range(len(items))]


def coder_turns(u: Unit, after: bool, hash_contract: Any, latency: int) -> list[dict[str, Any]]:
    """Every attempt of the unit's coder, as one conversation."""
    code = f"code/{u.module}.py"

    def write(text: str) -> dict[str, Any]:
        return use("Write", path=code, content=text)

    def log(fixed: str, failing: str, cause: str) -> dict[str, Any]:
        return use("append_coder_log", decision={
            "last_failure": f"{failing} failed", "last_cause": cause, "this_fix": fixed,
            "rationale": "the acceptance criterion says so", "changed_files": [code]})

    def close(items: tuple[str, ...], logged: dict[str, Any]) -> list[dict[str, Any]]:
        event = use("timeline_append", kind="code_patched", summary=f"{u.id}: patched")
        return [turn(logged, event, *done(items), latency=latency),
                turn({"text": f"Patched {code}."}, latency=latency)]

    body = {"unit_id": u.id, "version": hash_contract(contract(u)), **contract(u)}
    first = {"this_fix": f"First version of {u.id}", "rationale": "as the SDD says",
             "changed_files": [code, "contract.json"]}
    turns = [
        turn(plan(IMPLEMENT), write(u.bug),
             use("Write", path="contract.json", content=json.dumps(body, indent=2)),
             latency=latency),
        turn(use("append_coder_log", decision=first),
             use("timeline_append", kind="unit_coded", summary=f"{u.id}: first version"),
             *done(IMPLEMENT), latency=latency),
        turn({"text": f"Implemented {u.id}."}, latency=latency),
    ]
    items = RETRY_AFTER if after else RETRY_BEFORE
    verify = [use("verify_tests")] if after else []
    fixed = log(u.fix, u.failing, u.cause)
    smoke = use("Bash", command=f"python3 -B -c \"import sys; sys.path.insert(0, 'code'); "
                                f"import {u.module}; {u.smoke}\"")
    if u.kind == "plain":
        turns += [turn(plan(items), write(u.good), *verify, latency=latency), *close(items, fixed)]
    elif u.kind == "regression" and after:  # verify_tests shows the regression at once
        turns += [turn(plan(items), write(u.regress or ""), *verify, latency=latency),
                  turn(write(u.good), *verify, latency=latency), *close(items, fixed)]
    elif u.kind == "regression":  # the tester's next run finds it: attempt 3
        turns += [turn(plan(items), write(u.regress or ""), latency=latency), *close(items, fixed)]
        broke = log(u.fix, u.regressed, f"the attempt-2 change to {code} broke what passed")
        turns += [turn(plan(items), write(u.good), latency=latency), *close(items, broke)]
    else:  # stuck: tweaks around the bug until a plan arrives (after) or seven tweaks (before)
        tweaks = u.variants[:3] if after else u.variants
        turns += [turn(plan(items), write(tweaks[0]), smoke, latency=latency)]
        turns += [turn(write(v), smoke, latency=latency) for v in tweaks[1:]]
        turns += [turn(write(u.good), *(verify or [smoke]), latency=latency), *close(items, fixed)]
    return turns


def tester_turns(u: Unit, latency: int) -> list[dict[str, Any]]:
    """Attempt 1's tester session (later attempts re-run its tests with no model)."""
    return [
        turn(plan(TESTER), use("Write", path=f"tests/test_{u.module}.py", content=u.tests),
             use("run_tests"), latency=latency),
        turn(use("timeline_append", kind="unit_tested", summary="3 tests"),
             use("timeline_append", kind="test_failed", summary="red"), *done(TESTER),
             latency=latency),
        turn({"text": "Three tests, one per criterion."}, latency=latency),
    ]


def script(after: bool, hash_contract: Any, latency: int) -> dict[str, Any]:
    sessions: dict[str, Any] = {}
    for u in UNITS:
        coder = coder_turns(u, after, hash_contract, latency)
        sessions[f"coder.*.{u.id}"] = {"turns": dict(enumerate(coder, 1))}
        sessions[f"tester.*.{u.id}"] = {"turns": dict(enumerate(tester_turns(u, latency), 1))}
    plan_text = "1. The bug is the lazy iterator: return a list.\nDo not touch again: the rest."
    sessions["*.reassess.*"] = {"default": {"content": [{"text": plan_text}]}}
    return {"sessions": sessions, "default": {"content": [{"text": "Nothing scripted."}]}}


# --- one run (a child process that imports the code under test) ---------------------------


class Counting:
    """An LLMProvider that counts calls and tokens per unit (reassess sessions included)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self.tokens: Counter[str] = Counter()

    def complete(self, request: Any) -> Any:
        response = self.inner.complete(request)
        unit = request.session_key.split(".")[3]
        self.calls[unit] += 1
        self.tokens[unit] += response.usage.prompt_tokens + response.usage.output_tokens
        return response


def run_child(after: bool, latency: int) -> dict[str, Any]:
    """Carry every chain of the project to its end with the imported code; per-unit numbers."""
    from devloop.core.config import load_settings
    from devloop.core.contracts import hash_contract
    from devloop.fleet.dispatch import enqueue_project
    from devloop.fleet.failures import StepStopped
    from devloop.fleet.records import steps_of
    from devloop.fleet.steps import StepEnv, decide_step, run_step
    from devloop.llm.anthropic import AnthropicProvider
    from devloop.llm.stub import StubServer
    from devloop.server.redis_server import RedisServer
    from devloop.store import RedisStore

    work = Path(tempfile.mkdtemp(prefix="devloop-bench-loop-"))
    try:
        project = build_project(work / "project", hash_contract)
        with (
            RedisServer(work / "redis") as server,
            StubServer(script(after, hash_contract, latency)) as stub,
        ):
            store = RedisStore(server.client())
            provider = Counting(AnthropicProvider(api_key="bench", base_url=stub.base_url))
            settings = load_settings().model_copy(update={"step_retry_base_s": 0.1})
            env = StepEnv(store, settings, lambda: provider, "bench:1")
            _, queue = enqueue_project(store, project)
            chains: Counter[str] = Counter()
            started = time.monotonic()
            while queue:
                msg = queue.pop(0).msg
                chains[msg.unit_id] += 1
                try:
                    if not msg.skip_coder:
                        msg = _again(lambda m=msg: run_step("coder", env, m))
                    msg = _again(lambda m=msg: run_step("tester", env, m))
                    queue += _again(lambda m=msg: decide_step(env, m))
                except StepStopped:
                    pass
            wall = time.monotonic() - started
            ids = [u.id for u in UNITS]
            steps = steps_of(store, PID, ids)
            units = {}
            for u in UNITS:
                state = store.get_state(PID, u.id)
                units[u.id] = {
                    "kind": u.kind,
                    "status": state.status,
                    "attempts": state.attempt,
                    "chains": chains[u.id],
                    "calls": provider.calls[u.id],
                    "tokens": provider.tokens[u.id],
                    "step_s": round(sum(r.ended_at - r.started_at for r in steps[u.id]), 2),
                    "blocked_reason": state.blocked_reason,
                }
        return {"after": after, "wall_s": round(wall, 2), "units": units}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _again(call: Any) -> Any:
    """A step, run again after each wait it asks for (as a Celery retry would)."""
    from devloop.fleet.failures import StepWaiting

    while True:
        try:
            return call()
        except StepWaiting as wait:
            time.sleep(wait.retry_in_s)


# --- the two runs and the table -----------------------------------------------------------


def extract(ref: str, dest: Path) -> Path:
    """The devloop package, prompts and toolchain specs of a git ref, in dest."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "devloop", "prompts", "toolchains"],
        check=True, capture_output=True,
    ).stdout
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_variant(after: bool, code: Path, latency: int) -> dict[str, Any]:
    """One run in a child process whose `devloop` is the one under `code`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), str(ROOT / "bench")])}
    argv = [sys.executable, str(Path(__file__)), "--child", "after" if after else "before",
            "--latency-ms", str(latency)]
    done = subprocess.run(argv, env=env, cwd=code, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the {'after' if after else 'before'} run failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def per_green(run: dict[str, Any], kinds: tuple[str, ...]) -> dict[str, float]:
    """Totals over the units of `kinds`, divided by how many of them passed."""
    units = [u for u in run["units"].values() if u["kind"] in kinds]
    green = sum(u["status"] == "passed" for u in units) or 1
    out = {k: sum(u[k] for u in units) / green for k in ("calls", "tokens", "chains", "step_s")}
    out["green"] = sum(u["status"] == "passed" for u in units)
    out["units"] = len(units)
    return out


def table(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    groups = {"all": ("plain", "regression", "stuck"), "plain": ("plain",),
              "regression": ("regression",), "stuck": ("stuck",)}
    for name, kinds in groups.items():
        b, a = per_green(before, kinds), per_green(after, kinds)
        rows.append({"units": name, "before": b, "after": a,
                     "ratio": {k: round(a[k] / b[k], 3) if b[k] else None
                               for k in ("calls", "tokens", "chains", "step_s")}})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=("before", "after"), help=argparse.SUPPRESS)
    parser.add_argument("--before-ref", default=BEFORE_REF, help="git ref of the code before")
    parser.add_argument("--latency-ms", type=int, default=100, help="scripted time per turn")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(args.child == "after", args.latency_ms)))
        return 0
    with tempfile.TemporaryDirectory(prefix="devloop-before-") as tmp:
        old = extract(args.before_ref, Path(tmp) / "code")
        before = run_variant(False, old, args.latency_ms)
    after = run_variant(True, ROOT, args.latency_ms)
    rows = table(before, after)
    print(f"{len(UNITS)} units, first attempts red; per green unit, before ({args.before_ref}) "
          f"-> after (this code), after/before; {args.latency_ms} ms per scripted turn")
    print(f"{'units':<11} {'green':>9} {'model calls':>20} {'tokens':>26} {'chains':>17} "
          f"{'step wall s':>20}")
    for row in rows:
        b, a, r = row["before"], row["after"], row["ratio"]
        cells = [f"{b[k]:.1f} -> {a[k]:.1f} ({r[k]:.2f})" for k in ("calls", "chains", "step_s")]
        tokens = f"{b['tokens']:,.0f} -> {a['tokens']:,.0f} ({r['tokens']:.2f})"
        print(f"{row['units']:<11} {a['green']:>4}/{a['units']:<4} {cells[0]:>20} {tokens:>26} "
              f"{cells[1]:>17} {cells[2]:>20}")
    print(f"wall time of the whole run: {before['wall_s']} s -> {after['wall_s']} s")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"before_ref": args.before_ref, "latency_ms": args.latency_ms,
                               "rows": rows, "before": before, "after": after}, indent=2) + "\n")
    passed = all(u["status"] == "passed" for run in (before, after) for u in run["units"].values())
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
