"""Paperwork the runtime derives: the facts of a session, recorded by the runtime, once.

Facts are the runtime's, narrative is the model's (DESIGN.md, "One writer per record"):

- timeline: `unit_tested` and its verdict (`test_passed`, `test_failed`, `test_starved`)
  from the run that stands (the try's `runs/{run_id}/result.json`), and `unit_coded` or
  `code_patched` from the attempt's commit of `code/` or `contract.json`. Each is written
  when its commit lands, so once per fact (a redelivered step commits nothing), agent =
  the role, in the seed's line format. `timeline_append` never writes a second event:
  the model's summary is the narrative the runtime's event carries after its facts.
- todolist: an item whose output exists (the files its title names, its output_ref, the
  run or coder.log entry its tool makes) is marked done.
- coder.log: `coder_tools.log_facts` writes an entry's facts when the model logged none.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from typing import Any

from devloop.agent.tools import ProgressEvent, ToolContext
from devloop.core.contracts import contract_bridge
from devloop.core.models import CoderDecision, RunResult, TimelineEvent
from devloop.ledgers import parse_coder_log
from devloop.roles.services import RoleServices
from devloop.safe.safetree import Limits, TooMany, walk

SUMMARY_CAP = 500  # timeline_append's limit on a summary, kept for the runtime's too
CODE_KINDS = ("unit_coded", "code_patched")
VERDICT_KINDS = ("test_passed", "test_failed", "test_starved")


# --- the timeline ----------------------------------------------------------------------


def verdict_kind(result: RunResult) -> str:
    """The timeline kind of a run's verdict."""
    return "test_passed" if result.ok else "test_starved" if result.starved else "test_failed"


def code_kind(role: RoleServices) -> str:
    """What a commit of this attempt's code is: the first version, or a patch of one."""
    first = role.mode == "implement" or (role.mode == "resume" and role.attempt == 1)
    return "unit_coded" if first else "code_patched"


def _summary(facts: str, said: str | None) -> str:
    """The runtime's facts, then what the model said of them."""
    return (f"{facts}: {said}" if said else facts)[:SUMMARY_CAP]


def _append(
    role: RoleServices, kind: str, ref: str, summary: str, emit: Callable[[ProgressEvent], None]
) -> TimelineEvent:
    event = role.timeline.append(
        kind, unit_id=role.unit_id, ref=ref, summary=summary, agent=role.role
    )
    emit(ProgressEvent("timeline", detail={"kind": kind}))
    return event


def record_run(
    role: RoleServices,
    committed: list[str],
    emit: Callable[[ProgressEvent], None] = lambda e: None,
    rerun: bool = False,
) -> list[TimelineEvent]:
    """`unit_tested` and the verdict of the run that stands, when its result.json was
    committed: once per run (a redelivered step commits nothing, and records nothing)."""
    if role.last_run is None or f"runs/{role.run_id}/result.json" not in committed:
        return []
    assert role.run_id is not None
    result = RunResult.model_validate(role.last_run["result"])
    s = result.summary
    facts = f"{s.passed}/{s.total} passed"
    if result.crashed:
        facts = f"crashed: {(result.crash_reason or 'no reason')[:200]}"
    elif result.failures:
        facts += f", failing: {', '.join(f.test for f in result.failures[:3])}"
    if rerun:
        facts = f"re-run of existing tests: {facts}"
    return [
        _append(role, kind, role.run_id, _summary(facts, role.narrative.get(kind)), emit)
        for kind in ("unit_tested", verdict_kind(result))
    ]


def record_commit(
    role: RoleServices,
    committed: list[str],
    emit: Callable[[ProgressEvent], None] = lambda e: None,
) -> TimelineEvent | None:
    """`unit_coded` / `code_patched` when the attempt's commit changed code or its
    contract: once per commit (a redelivered step commits nothing, and records nothing)."""
    code = [f for f in committed if f.startswith("code/") or f == "contract.json"]
    if not code:
        return None
    said = "; ".join(role.narrative[k] for k in CODE_KINDS if role.narrative.get(k))
    more = f" and {len(code) - 5} more" if len(code) > 5 else ""
    facts = f"committed {', '.join(code[:5])}{more}"
    return _append(role, code_kind(role), code[0], _summary(facts, said), emit)


def note(role: RoleServices, kind: str, summary: str) -> str:
    """timeline_append: keep the model's words for the runtime's event of that fact, and
    say what the runtime records (one event per fact, never a second one)."""
    said = role.narrative.get(kind)
    # The same words again (a turn replayed after a resume, a model repeating itself) are
    # kept once.
    if summary not in (said or "").split("; "):
        role.narrative[kind] = f"{said}; {summary}"[:SUMMARY_CAP] if said else summary
        role.persist_narrative()
    if kind in CODE_KINDS:
        recorded = code_kind(role)
        text = (
            f"noted: the runtime records {recorded} itself, once, when this attempt's code/ "
            "or contract.json is committed; your summary goes on that event"
        )
        return text + (f" (this attempt is {recorded}, not {kind})" if recorded != kind else "")
    run = role.run_id or "this run"
    text = (
        f"noted: the runtime records unit_tested and the verdict of {run} itself, once, "
        "from the run that stands when the session ends; your summary goes on the event"
    )
    if role.last_run is not None and kind in VERDICT_KINDS:
        actual = verdict_kind(RunResult.model_validate(role.last_run["result"]))
        if actual != kind:
            text += f". Your last run's verdict is {actual}, not {kind}: that is what is recorded"
    return text


# --- coder.log ---------------------------------------------------------------------------


def logged(ctx: ToolContext) -> list[CoderDecision]:
    """The decisions in coder.log as append_coder_log wrote them (the tool's record, never
    the view's file, which the session may have changed); the view's when it has none."""
    record = ctx.owned_files.get("coder.log")
    if record is not None:
        text = (record.data or b"").decode("utf-8", errors="replace")
    else:
        try:
            text = ctx.files.read_text(f"{ctx.unit_rel}/coder.log")
        except (OSError, UnicodeDecodeError):
            text = ""
    return parse_coder_log(text)


def written_files(role: RoleServices) -> list[str]:
    """What the attempt changed that a coder.log entry names: code/** and contract.json."""
    return [f for f in role.changed() if f.startswith("code/") or f == "contract.json"]


# --- the todolist ------------------------------------------------------------------------

# Paths a todo item's title may name as its output (unit-relative).
_PATH = re.compile(
    r"(?<![\w./-])((?:code|tests|runs)/[\w.@*/-]*|contract\.json|coder\.log|result\.json)"
)
_RUN_ID = re.compile(r"\brun-\d+-\d+\b")


def _tool_facts(ctx: ToolContext, role: RoleServices) -> dict[str, Callable[[], bool]]:
    """A tool a todo item names -> whether what it makes exists."""

    def bridged() -> bool:
        try:
            contract = json.loads(ctx.files.read_text(f"{ctx.unit_rel}/contract.json"))
        except (OSError, ValueError):
            return False
        ok = isinstance(contract, dict) and contract_bridge(role.units, role.unit_id, contract).ok
        return bool(ok)

    def entry() -> bool:
        return any(d.attempt == role.attempt for d in logged(ctx))

    return {
        "run_tests": lambda: role.last_run is not None,
        "verify_tests": lambda: role.last_verify is not None or role.baseline is not None,
        "append_coder_log": entry,
        "coder.log": entry,  # the item's output is this attempt's entry, not the old file
        "hash_contract": bridged,
        "contract_bridge": bridged,
        "sandbox_check": lambda: not role.violations(),
    }


def _path_exists(ctx: ToolContext, path: str) -> bool:
    """A file, a directory holding a file, or a glob matching a file, in the unit dir."""
    path = path.rstrip("/")
    top = path.split("/")[0]
    if "*" not in path:
        rel = f"{ctx.unit_rel}/{path}"
        try:
            if ctx.files.is_file(rel):
                return True
            if not ctx.files.is_dir(rel):
                return False
        except OSError:
            return False
        pattern = f"{path}/*"
    else:
        pattern = path
    try:
        if not ctx.files.is_dir(f"{ctx.unit_rel}/{top}"):
            return False
        return any(
            e.kind == "file" and fnmatch.fnmatchcase(f"{top}/{e.rel}", pattern)
            for e in walk(ctx.files, f"{ctx.unit_rel}/{top}", Limits())
        )
    except (TooMany, OSError):
        return False


def item_outputs(item: dict[str, Any]) -> list[str]:
    """What an item says it produces: its output_ref, the paths, run ids and tools its
    title names."""
    words = f"{item.get('title', '')} {item.get('output_ref') or ''}"
    found = _PATH.findall(words) + _RUN_ID.findall(words)
    found += [t for t in _TOOLS if re.search(rf"\b{re.escape(t)}\b", words)]
    return list(dict.fromkeys(found))


_TOOLS = ("run_tests", "verify_tests", "append_coder_log", "hash_contract", "contract_bridge",
          "sandbox_check")


def output_exists(ctx: ToolContext, role: RoleServices, output: str,
                  facts: dict[str, Callable[[], bool]]) -> bool:
    """Whether one output an item names exists now."""
    if output in facts:
        return facts[output]()
    if _RUN_ID.fullmatch(output):
        return _path_exists(ctx, f"runs/{output}/result.json")
    if output == "result.json":
        return role.run_id is not None and _path_exists(ctx, f"runs/{role.run_id}/result.json")
    return _path_exists(ctx, output)


def mark_done(ctx: ToolContext, role: RoleServices) -> list[str]:
    """Mark done every open todo item whose outputs all exist; the ids marked."""
    facts = _tool_facts(ctx, role)
    marked = []
    for item in role.todo:
        if item["status"] in ("done", "skipped"):
            continue
        outputs = item_outputs(item)
        if outputs and all(output_exists(ctx, role, o, facts) for o in outputs):
            item["status"] = "done"
            item.setdefault("output_ref", outputs[0])
            marked.append(item["id"])
    if marked:
        role.persist_todo()
        done = sum(i["status"] in ("done", "skipped") for i in role.todo)
        ctx.emit(ProgressEvent("todo", step=done, total=len(role.todo)))
    return marked
