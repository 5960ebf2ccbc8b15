"""What the runtime hands a role's session: memory, unit spec, contracts, history.

Memory notes, upstream contract.json files, failures, hints and decisions were written by
a model or by code under test: they reach the model only in its first user turn, wrapped
as untrusted data (prompts/data.md), never in the system prompt.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from devloop.core.models import CoderDecision, HistoryEntry, RunResult
from devloop.ledgers import parse_coder_log
from devloop.roles import memory
from devloop.store import Fence, RedisStore

# The SDD's contract block: its JSON is HTML-escaped in the file (`-&gt; int`).
_CONTRACT_PRE = re.compile(r"(<pre\b[^>]*\bdata-contract\b[^>]*>)(.*?)(</pre>)", re.S | re.I)


def plain_contract(section: str) -> str:
    """The SDD section with its contract as the plain JSON it declares (`-> int`), so a
    model that copies it into contract.json copies what is hashed, not its HTML escape."""
    return _CONTRACT_PRE.sub(lambda m: m[1] + html.unescape(m[2]) + m[3], section)


def memory_notes(
    store: RedisStore, pid: str, role: str, unit: str, spec: str, company: str
) -> list[dict[str, Any]]:
    """The role's top notes by relevance to the unit spec: {topic, relevance, content,
    source} (roles/memory.py says where they come from and how they are ranked).

    Other units' pending notes wait for them to pass; the company's notes promoted by this
    project are its own notes already, so only other projects' are added.
    """
    notes = [memory.parse(n, t, role, "project") for n, t in store.memory_notes(pid, role).items()]
    notes += [
        memory.parse(n, t, role, "own") for n, t in store.pending_notes(pid, role, unit).items()
    ]
    notes += [
        memory.parse(n, t, role, "company")
        for n, t in store.company_notes(company, role).items()
        if not n.startswith(f"{pid}--")
    ]
    return memory.rank(notes, spec)


def upstream_contracts(
    store: RedisStore, pid: str, deps: list[str], written: dict[str, bytes]
) -> list[dict[str, str]]:
    """Each dependency's contract.json (`written`: dependency -> its contract.json, as the
    session read them) or its SDD contract before it has one, as JSON text, with a label
    saying which it is (contract.json is the upstream coder's text)."""
    out = []
    for dep in deps:
        raw = written.get(dep)
        if raw:
            text = raw.decode("utf-8", errors="replace")
            source = f"contract.json of upstream unit {dep}, written by its coder"
        else:
            text = json.dumps(store.sdd_contract(pid, dep) or {}, indent=2, ensure_ascii=False)
            source = f"the SDD contract of upstream unit {dep} (it has no contract.json yet)"
        out.append({"unit_id": dep, "contract": text, "source": source})
    return out


def runs_by_attempt(files: dict[str, bytes]) -> dict[int, list[RunResult]]:
    """Every runs/*/result.json of a unit, grouped by attempt, oldest run first."""
    runs: dict[int, list[RunResult]] = {}
    names = sorted(
        (p for p in files if re.fullmatch(r"runs/[^/]+/result\.json", p)),
        key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p)],
    )
    for path in names:
        try:
            result = RunResult.model_validate_json(files[path])
        except ValueError:
            continue
        runs.setdefault(result.attempt, []).append(result)
    return runs


def decisions(files: dict[str, bytes]) -> list[CoderDecision]:
    """The unit's coder.log entries."""
    return parse_coder_log(files.get("coder.log", b"").decode("utf-8", errors="replace"))


def describe_decision(decision: CoderDecision) -> str:
    """A decision as the coder wrote it, for its own retry history."""
    parts = [f"{k}: {v}" for k, v in decision.model_dump(exclude_none=True).items()]
    return "\n".join(parts)


HANDOFF_CAP = 3000  # characters of a closing summary carried to the other role
HANDOFF_KEEP = 6  # attempts kept per role


def handoff_path(unit: str, role: str) -> str:
    """agent-state/ file of a role's closing summaries: {attempt: text}, newest last."""
    return f"handoff-{unit}-{role}.json"


def save_handoff(
    store: RedisStore, pid: str, unit: str, role: str, attempt: int, text: str,
    fence: Fence | None = None,
) -> None:
    """Keep a session's closing summary for the other role (nothing when it said nothing)."""
    text = text.strip()
    if not text:
        return
    kept = load_handoffs(store, pid, unit, role)
    kept[attempt] = text[:HANDOFF_CAP] + (" [...]" if len(text) > HANDOFF_CAP else "")
    newest = dict(sorted(kept.items())[-HANDOFF_KEEP:])
    data = json.dumps({str(k): v for k, v in newest.items()}, ensure_ascii=False).encode()
    store.put_agent_state(pid, handoff_path(unit, role), data, fence)


def load_handoffs(store: RedisStore, pid: str, unit: str, role: str) -> dict[int, str]:
    """attempt -> the closing summary a role's last session of that attempt wrote."""
    raw = store.agent_state_file(pid, handoff_path(unit, role))
    try:
        found = json.loads(raw) if raw else {}
        return {int(k): str(v) for k, v in found.items()}
    except (ValueError, AttributeError, TypeError):
        return {}


_CODE_FRAME = re.compile(r"\(at (code/[^)\s]+)\)")


def crash_hint(reason: str | None) -> str:
    """What the coder is told of a crashed run: where it was raised, when in code/."""
    frames = _CODE_FRAME.findall(reason or "")
    if frames:
        return (
            f"the run crashed before any test could judge the code, raised at {frames[0]} "
            "in your code (the reason above quotes it): fix that line so the module loads"
        )
    return "the run crashed before any test could judge the code: the reason above says why"


def reviews_path(unit: str) -> str:
    """agent-state/ file of a unit's reviews by people: {"reviews": [{attempt, verdict,
    note, by, ts}]} (written by devloop.fleet.review)."""
    return f"review-{unit}.json"


def review_notes(store: RedisStore, pid: str, unit: str) -> dict[int, str]:
    """attempt -> the note of a person who asked for changes after that attempt's green run."""
    raw = store.agent_state_file(pid, reviews_path(unit))
    try:
        reviews = json.loads(raw)["reviews"] if raw else []
        return {int(r["attempt"]): str(r["note"]) for r in reviews if r["verdict"] == "changes"}
    except (ValueError, KeyError, TypeError):
        return {}


def retry_history(
    files: dict[str, bytes],
    attempt: int,
    reviews: dict[int, str] | None = None,
    summaries: dict[int, str] | None = None,
) -> tuple[list[HistoryEntry], list[str]]:
    """Earlier attempts (decision + what the tester said, with its closing summary from
    `summaries`) and tests that regressed; a person's review note is among what was said
    about its attempt, as a hint."""
    runs = runs_by_attempt(files)
    logged = {d.attempt: d for d in decisions(files)}
    history = []
    for n in range(1, attempt):
        last_run = runs.get(n, [])[-1:] or []
        # Every key kept (None included): the retry prompt reads expected and got of each.
        said = [f.model_dump(mode="json") for r in last_run for f in r.failures]
        if last_run and last_run[0].crashed:
            said.append(
                {
                    "test": "(the test run crashed)",
                    "expected": "a run",
                    "got": last_run[0].crash_reason,
                    "hint": crash_hint(last_run[0].crash_reason),
                }
            )
        if n in (reviews or {}):
            said.append({"test": "(a person's review of the green run)", "expected": "approval",
                         "got": "changes requested", "hint": (reviews or {})[n]})
        mine = describe_decision(logged[n]) if n in logged else "(no coder.log entry)"
        history.append(HistoryEntry(attempt=n, my_decision=mine, tester_said=said,
                                    tester_summary=(summaries or {}).get(n, "")))
    return history, regressions(runs, attempt)


def regressions(runs: dict[int, list[RunResult]], attempt: int) -> list[str]:
    """Tests failing in the latest run that the run before it did not fail."""
    ordered = [r for n in sorted(runs) if n < attempt for r in runs[n] if not r.crashed]
    if len(ordered) < 2:
        return []
    before = {f.test for f in ordered[-2].failures}
    return sorted(f.test for f in ordered[-1].failures if f.test not in before)


def status_codes(contract: dict[str, Any] | None) -> list[str]:
    """Every HTTP status a contract's exports declare, except 500 (a bug, not a feature)."""
    codes: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                if key == "responses" and isinstance(inner, dict):
                    codes.update(str(c) for c in inner if str(c).isdigit() and str(c) != "500")
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    walk((contract or {}).get("exports"))
    return sorted(codes)
