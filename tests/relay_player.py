"""A careful model for the stub's relay, standing in for the person who plays it.

It reads each request only through the relay's reader (`view`: what a model is shown) and
answers only through its writer. What it knows beforehand is a plan of the files each unit
ends with (the code and the tests a model would arrive at); everything else it takes from
the request: the contract from the SDD section as the prompt prints it, how to import a
dependency from the environment the prompt states, the mode, the tools' results. It acts as
a careful model would: plan, do the work in as few turns as the results allow, mark each
todo item with the call that completes it, sum up. Whatever a clean run should never show
(a tool error, a check that says not ok, a red run, text handed back after its summary, a
contract it cannot copy as printed) is written down in `surprises`.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devloop.llm.stub import StubServer
from devloop.llm.stub.relay import RelayDesk, RelayDir, RequestView, view, write_answer
from devloop.llm.stub.turn import Turn
from tests.workers.runproc import RunProcess, clean_env

USES = re.compile(r"\{\{uses ([\w-]+)\}\}")  # in planned code: the import the prompt states


@dataclass
class UnitPlan:
    """The files a unit ends with; code may hold `{{uses DEP}}` for the prompt's import line."""

    code: dict[str, str]
    tests: dict[str, str]
    note: str = ""  # what the coder tells the tester in its summary


@dataclass
class _Session:
    role: str
    unit: str
    system: str = ""
    summary: str = ""  # what it said when it ended (nothing: it has not)
    written: list[str] = field(default_factory=list)


@dataclass
class CarefulModel:
    """Answers the relay's requests, one at a time, until stopped."""

    relay: RelayDir
    plans: dict[str, UnitPlan]
    surprises: list[str] = field(default_factory=list)
    answered: list[tuple[int, str]] = field(default_factory=list)  # (seq, session key)
    seen: dict[int, RequestView] = field(default_factory=dict)
    tokens: int = 0  # input and output tokens of every answer served (play_run counts them)
    _sessions: dict[str, _Session] = field(default_factory=dict)

    def per_unit(self) -> Counter[str]:
        """Requests answered per unit."""
        return Counter(key.rsplit(".", 1)[-1] for _, key in self.answered)

    def play(self, stop: threading.Event) -> None:
        """Answer every request as it comes, until `stop` is set."""
        while not stop.is_set():
            waiting = self.relay.waiting()
            if not waiting:
                time.sleep(0.05)
                continue
            entry = waiting[0]
            shown = view(self.relay, entry.seq)
            self.seen[entry.seq] = shown
            try:
                turn = self.decide(shown)
            except Exception as exc:  # a request it cannot read is a finding, not a crash
                self.surprises.append(f"request {entry.seq}: {exc!r}")
                turn = Turn.model_validate({"content": [{"text": f"I cannot go on: {exc}"}]})
            write_answer(self.relay, entry.seq, turn)
            self.answered.append((entry.seq, entry.session_key))

    def decide(self, shown: RequestView) -> Turn:
        """The turn a careful model answers this request with."""
        role, unit = shown.session_key.split(".")[0], shown.session_key.rsplit(".", 1)[-1]
        session = self._sessions.setdefault(shown.session_key, _Session(role, unit))
        if shown.system is not None:
            session.system = shown.system
        texts, results = _news(shown)
        for name, text, error in results:
            if error or re.search(r'"ok": false|"crashed": true', text):
                self.surprises.append(f"{shown.session_key} turn {shown.turn}: {name}: "
                                      f"{text[:300]}")
        task = any("# Task" in t for t in texts)
        if texts and not task:  # the runtime handed something back
            self.surprises.append(f"{shown.session_key} turn {shown.turn}: handed back: "
                                  f"{' '.join(texts)[:300]}")
        if task or (not results and not texts):
            blocks = self._coder_work(session, texts) if role == "coder" else \
                self._tester_work(session)
            return Turn.model_validate({"content": blocks})
        session.summary = self._summary(session, results)
        return Turn.model_validate({"content": [{"text": session.summary}]})

    def _coder_work(self, session: _Session, texts: list[str]) -> list[dict[str, Any]]:
        plan = self.plans[session.unit]
        contract = _contract(session.system)
        session.written = list(plan.code)
        steps: list[tuple[str, list[dict[str, Any]]]] = [
            (f"Write {', '.join(plan.code)}",
             [_call("Write", path=p, content=self._filled(session, c))
              for p, c in plan.code.items()]),
            ("Write contract.json with hash_contract",
             [_call("hash_contract", write=True, contract={"unit_id": session.unit, **contract})]),
            ("syntax_check", [_call("syntax_check")]),
            ("Log the decision in coder.log", [_call("append_coder_log", decision=self._decision(
                session, texts))]),
            ("sandbox_check", [_call("sandbox_check")]),
        ]
        return _planned(f"{session.unit}: code, contract, checks and log.", steps)

    def _tester_work(self, session: _Session) -> list[dict[str, Any]]:
        if "Mode: **retry**" in session.system:  # its tests stand: run them on the new code
            return [_call("run_tests")]
        plan = self.plans[session.unit]
        session.written = list(plan.tests)
        steps = [
            (f"Write {', '.join(plan.tests)}, a test per acceptance criterion",
             [_call("Write", path=p, content=c) for p, c in plan.tests.items()]),
            ("run_tests", [_call("run_tests")]),
        ]
        return _planned(f"{session.unit}: tests, then one run.", steps)

    def _filled(self, session: _Session, code: str) -> str:
        def line(found: re.Match[str]) -> str:
            # The prompt's environment names the import "exactly so": `- money: `from ...``.
            stated = re.search(rf"^\s*- {re.escape(found[1])}: `([^`]+)`", session.system, re.M)
            if stated is None:
                self.surprises.append(f"{session.unit}: the prompt states no import of "
                                      f"{found[1]}")
                return f"# no import of {found[1]} stated"
            return stated[1]
        return USES.sub(line, code)

    def _decision(self, session: _Session, texts: list[str]) -> dict[str, Any]:
        decision = {"this_fix": f"{session.unit}: {', '.join(session.written)} for its contract",
                    "rationale": "The code the contract and acceptance criteria ask for, using "
                                 "the dependencies' code as the prompt says to import it"}
        if "Mode: **retry**" in session.system:
            said = " ".join(texts)
            decision["last_failure"] = said[:200]
            decision["last_cause"] = "as the failures in this attempt's first message say"
        return decision

    def _summary(self, session: _Session, results: list[tuple[str, str, bool]]) -> str:
        if session.role == "coder":
            note = self.plans[session.unit].note
            return (f"Implemented {session.unit}: {', '.join(session.written)}; contract.json "
                    f"written by hash_contract (bridge ok), syntax_check and sandbox_check ok."
                    + (f" For the tester: {note}" if note else ""))
        ran = next((t for n, t, _ in reversed(results) if n == "run_tests"), "")
        counts = re.search(r'"passed": (\d+),\s*"failed": (\d+)', ran)
        said = f"{counts[1]} passed, {counts[2]} failed" if counts else "the run as reported"
        return f"Tests for {session.unit}: {', '.join(session.written)}; {said}."


def _call(name: str, **given: Any) -> dict[str, Any]:
    return {"tool_use": {"name": name, "input": given}}


def _planned(opening: str, steps: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The todolist, then each step's calls followed by the mark of its item."""
    items = [{"id": f"step-{i:03d}", "title": title} for i, (title, _) in enumerate(steps, 1)]
    blocks: list[dict[str, Any]] = [{"text": opening}, _call("write_todolist", items=items)]
    for item, (_, calls) in zip(items, steps, strict=True):
        blocks += [*calls, _call("update_todo_item", id=item["id"], status="done")]
    return blocks


def _news(shown: RequestView) -> tuple[list[str], list[tuple[str, str, bool]]]:
    """The user texts and the tool results (name, text, is_error) the request shows."""
    texts, results = [], []
    for message in shown.messages:
        if message["role"] != "user":
            continue
        for block in message["content"]:
            if block.get("type") == "text":
                texts.append(str(block["text"]))
            elif block.get("type") == "tool_result":
                content = block.get("content", "")
                text = content if isinstance(content, str) else "\n".join(
                    str(b.get("text", "")) for b in content if isinstance(b, dict))
                name = shown.calls.get(str(block.get("tool_use_id")), "?").split(" ")[0]
                results.append((name, text, bool(block.get("is_error"))))
    return texts, results


def _contract(system: str) -> dict[str, Any]:
    """The SDD section's contract, copied as printed (it must be plain JSON to copy)."""
    found = re.search(r"<pre data-contract>(.*?)</pre>", system, re.S)
    if found is None:
        raise ValueError("the prompt shows no <pre data-contract>")
    contract: dict[str, Any] = json.loads(found[1])
    return {"exports": contract["exports"], "consumes": contract.get("consumes", [])}


def plans_from_script(script: Path, units: list[str]) -> dict[str, UnitPlan]:
    """Each unit's final code/ and tests/ files, replayed from a stub script's sessions
    (every Write, then every Edit, in turn order)."""
    data = yaml.safe_load(script.read_text())
    plans = {}
    for unit in units:
        files: dict[str, dict[str, str]] = {"coder": {}, "tester": {}}
        for role in files:
            session = data["sessions"][f"{role}.*.{unit}"]
            for _, turn in sorted(session["turns"].items()):
                for block in turn["content"]:
                    call = block.get("tool_use") or {}
                    given = call.get("input") or {}
                    path = given.get("path", "")
                    if not path.startswith(("code/", "tests/")):
                        continue
                    if call["name"] == "Write":
                        files[role][path] = given["content"]
                    elif call["name"] == "Edit":
                        files[role][path] = files[role][path].replace(given["old"], given["new"])
        plans[unit] = UnitPlan(files["coder"], files["tester"])
    return plans


def play_run(folder: Path, relay: Path, plans: dict[str, UnitPlan],
             timeout_s: float) -> tuple[CarefulModel, int | None, str]:
    """`devloop run FOLDER --llm anthropic` against a relay the careful model answers: the
    model, the run's exit code (None: it did not end in time) and its output."""
    desk = RelayDesk(relay, timeout_s=120)
    model = CarefulModel(desk.files, plans)
    stop = threading.Event()
    player = threading.Thread(target=model.play, args=(stop,), daemon=True)
    player.start()
    with StubServer({}, desk=desk) as stub:  # standing in for Claude: `--llm anthropic`
        env = clean_env(ANTHROPIC_BASE_URL=stub.base_url, ANTHROPIC_API_KEY="relay")
        run = RunProcess(folder, env=env, llm="anthropic")
        try:
            code: int | None = run.start().wait(timeout_s)
        except AssertionError:  # still running past timeout_s (close() stops it)
            code = None
        finally:
            output = run.output()
            run.close()
            stop.set()
            player.join(timeout=10)
        model.tokens = sum(sum((r.usage or {}).values()) for r in stub.requests)
    return model, code, output
