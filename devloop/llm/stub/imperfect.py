"""A seeded imperfect model: the script's turns, played with the slips real models make.

Each attempt of a session (its first user message starts "# Data for this attempt") is
played from the script's turns for that attempt: the turns up to and including the first
one without a tool call (the closing text), as `devloop new` writes them. With seeded
probabilities per scripted working turn it forgets a bookkeeping call, breaks a call's
input, writes a wrong first fix, weakens a test, runs the tests first, repeats an edit,
ends its turn early or rambles past its output limit. It answers the runtime as a
careful model would: a schema error gets the call again, right; a self-check failure or
the one reminder gets what it names. Nothing is kept between requests: every answer is
worked out again from the request (its transcript), the seed, the session key and the
turn, so the same seed and the same requests make the same run.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from devloop.llm.stub.attempt import Attempt, Call, Played, plan_attempt
from devloop.llm.stub.respond import tool_use_id
from devloop.llm.stub.turn import Strict, Turn

if TYPE_CHECKING:
    from devloop.llm.stub.script import Script

SlipKind = Literal[
    "forget_bookkeeping", "bad_arguments", "wrong_fix", "weak_test", "tests_first",
    "repeat_edit", "early_end", "long_text",
]
SLIP_KINDS: tuple[SlipKind, ...] = (
    "forget_bookkeeping", "bad_arguments", "wrong_fix", "weak_test", "tests_first",
    "repeat_edit", "early_end", "long_text",
)
# What the runtime says (devloop/agent/toolloop.py, devloop/agent/tools.py, first_turn.md).
TASK_MARK = "# Data for this attempt"
CHECK_MARKS = ("self-check failed", "it is asked for once")
SCHEMA_ERROR = "invalid input for "
OWN_CODE = "## This unit's code"


class ImperfectOptions(Strict):
    """The `imperfect:` block of a stub script."""

    seed: int = 0
    rate: float = Field(default=0.1, ge=0, le=1)  # every slip's chance per working turn
    rates: dict[SlipKind, float] = Field(default_factory=dict)  # per slip, over `rate`

    def rate_of(self, kind: SlipKind) -> float:
        return self.rates.get(kind, self.rate)


def answer_turn(script: Script, key: str, turn: int, body: dict[str, Any]) -> Turn | None:
    """The turn to answer: the script's, or, with an `imperfect:` block, the imperfect
    model's play of it."""
    if script.imperfect is None:
        return script.turn_for(key, turn)
    return ImperfectModel(script, script.imperfect).turn(key, turn, body)


def _texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    out = []
    for block in content or []:
        if isinstance(block, dict) and block.get("type") == "text":
            out.append(str(block.get("text", "")))
    return out


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return str(content or "")


def _is_task(message: dict[str, Any]) -> bool:
    return any(TASK_MARK in t[:400] for t in _texts(message))


class ImperfectModel:
    """The imperfect model over a script; `turn` answers one request."""

    def __init__(self, script: Script, options: ImperfectOptions) -> None:
        self.script, self.options = script, options

    # --- the request ---------------------------------------------------------------------

    def turn(self, key: str, n: int, body: dict[str, Any]) -> Turn | None:
        """Turn n of the session: the current attempt replayed from its first message."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        users: list[tuple[int, dict[str, Any]]] = []  # (the turn it asks for, the message)
        assistants = 0
        for message in messages:
            if message.get("role") == "assistant":
                assistants += 1
            elif message.get("role") == "user":
                users.append((assistants + 1, message))
        starts = [i for i, (_, m) in enumerate(users) if _is_task(m)]
        if not starts or users[-1][0] != n:
            return self.script.turn_for(key, n)  # not an attempt of a role (reassess, ...)
        begin = starts[-1]
        tools = {t.get("name"): t for t in body.get("tools") or [] if isinstance(t, dict)}
        attempt = plan_attempt(self.script, self.options, key, len(starts),
                               users[begin][0], tools)
        if not attempt.turns and attempt.closing is None:
            return self.script.turn_for(key, n)
        answer: Played | Turn | None = None
        for turn_no, message in users[begin:]:
            answer = self._step(attempt, key, turn_no, message, users[begin][1])
        return answer.turn() if isinstance(answer, Played) else answer

    def _step(self, a: Attempt, key: str, n: int, message: dict[str, Any],
              task: dict[str, Any]) -> Played | Turn | None:
        """The answer to one user message of the attempt, moving its plan on."""
        if _is_task(message) and a.pos == 0 and not a.last:
            return self._next(a)
        said = "\n".join(_texts(message))
        if any(mark in said for mark in CHECK_MARKS):
            # What it was asked for, then its closing words: the plan is over.
            a.pos = len(a.turns)
            return self._answer(a, self._repair(a, said, "\n".join(_texts(task))),
                                "Fixing what the runtime named.")
        broken = self._schema_errors(a, key, n - 1, message)
        if broken:  # the same calls again, right; the plan goes on after them
            return self._answer(a, broken, "Calling it again with the input it asks for.")
        return self._next(a)

    def _answer(self, a: Attempt, calls: list[Call], text: str) -> Played | Turn | None:
        if not calls:
            return self._next(a)
        played = Played([text, *calls])
        a.last = played.blocks
        return played

    def _next(self, a: Attempt) -> Played | Turn | None:
        if a.pos < len(a.turns):
            played = a.turns[a.pos]
            a.pos += 1
            a.last = played.blocks
            return played
        a.last = []
        return a.closing

    def _schema_errors(self, a: Attempt, key: str, turn: int,
                       message: dict[str, Any]) -> list[Call]:
        """The calls of the last turn to make again: each whose input the tool refused, right
        this time, and the later ones of that turn that failed after it."""
        content = message.get("content")
        results = {b.get("tool_use_id"): b for b in content if isinstance(b, dict)
                   and b.get("type") == "tool_result"} if isinstance(content, list) else {}
        again: list[Call] = []
        refused = False
        for i, block in enumerate(a.last):
            if isinstance(block, str):
                continue
            result = results.get(tool_use_id(key, turn, i))
            if result is None or not result.get("is_error"):
                continue
            if _result_text(result).startswith(SCHEMA_ERROR):
                refused = True
                again.append(block.right())
            elif refused:
                again.append(block.right())
        return again if refused else []

    def _repair(self, a: Attempt, said: str, task: str) -> list[Call]:
        """What a self-check failure or the reminder names: the calls an early end left,
        the work again when the check failed on it, hints and bugs, the owed records."""
        calls = [c.right() for c in a.rest]
        a.rest = []
        items = [line[2:] for line in said.splitlines() if line.startswith("- ")]
        failed = "self-check failed" in said
        for item in items:
            test = _quoted(item, r"failure (.+?) needs a hint")
            if test is not None:
                path = _own_code(task)
                calls.append(Call("set_hint", *[{"test": test, "hint": (
                    f"`{path}` returns the wrong value for this test: change its return "
                    "statement to the value the contract declares")}] * 2))
                continue
            test = _quoted(item, r"failure (.+?) is not bridged")
            if test is not None:
                calls.append(Call("bug_open", *[{"test_name": test,
                                                  "title": f"{test} fails"}] * 2))
        handled = ("needs a hint", "not bridged", "coder.log", "todolist")
        if failed and not calls and any(not any(h in i for h in handled) for i in items):
            calls += [c.right() for c in a.work]
        for item in items:
            if "coder.log" in item:
                calls += [c.right() for c in a.work if c.name == "append_coder_log"][-1:]
            elif "no todolist" in item or "todolist states no" in item:
                calls += [c.right() for c in a.work if c.name == "write_todolist"][:1]
            elif item.startswith("todolist items not done: "):
                ids = item[len("todolist items not done: "):].split(": ", 1)[0]
                calls += [Call("update_todo_item", *[{"id": i.strip(), "status": "done"}] * 2)
                          for i in ids.split(",") if i.strip()]
        unique: list[Call] = []
        for call in calls:
            if all((c.name, c.sent) != (call.name, call.sent) for c in unique):
                unique.append(call)
        return unique

    # --- the plan ------------------------------------------------------------------------


def _quoted(item: str, pattern: str) -> str | None:
    """The python-quoted name a check item gives (`failure 'test_x' needs a hint`)."""
    match = re.match(pattern, item)
    if match is None:
        return None
    try:
        value = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _own_code(task: str) -> str:
    """The first code/ file the tester's first message shows of this unit's code."""
    own = task[task.find(OWN_CODE):] if OWN_CODE in task else task
    return (re.findall(r"code/[\w./-]+\.\w+", own) or ["code/"])[0]
