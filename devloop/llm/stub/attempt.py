"""The imperfect model's plan of an attempt: the script's turns with its slips drawn in.

`plan_attempt` reads the script's turns for an attempt (up to and including the first one
without a tool call) and draws each slip per working turn from (seed, session key, the
attempt's first turn, the working turn, the slip): the same inputs, the same plan.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from devloop.llm.stub import slips
from devloop.llm.stub.turn import Block, ToolUse, Turn

if TYPE_CHECKING:
    from devloop.llm.stub.imperfect import ImperfectOptions, SlipKind
    from devloop.llm.stub.script import Script

BOOKKEEPING = ("update_todo_item", "timeline_append", "append_coder_log")
TEST_TOOLS = ("run_tests", "verify_tests")
LONG_TEXT_CHARS = 6000


@dataclass
class Call:
    """A call the model makes: what it sends, and what it meant (they differ when it
    broke the input)."""

    name: str
    sent: dict[str, Any]
    meant: dict[str, Any]

    @classmethod
    def of(cls, use: ToolUse) -> Call:
        return cls(use.name, dict(use.input), dict(use.input))

    def right(self) -> Call:
        return Call(self.name, dict(self.meant), dict(self.meant))


@dataclass
class Played:
    """One turn as played: text and calls in order, and its stop reason."""

    blocks: list[str | Call]
    stop_reason: Literal["max_tokens"] | None = None
    latency_ms: int = 0

    def turn(self) -> Turn:
        content = [
            Block(text=b) if isinstance(b, str) else Block(tool_use=ToolUse(name=b.name,
                                                                            input=b.sent))
            for b in self.blocks
        ]
        return Turn(content=content, stop_reason=self.stop_reason, latency_ms=self.latency_ms)


@dataclass
class Attempt:
    """One attempt's plan and how far it got: the played turns, the calls an early end
    left, the scripted (correct) work and closing turn."""

    turns: list[Played]
    rest: list[Call]
    work: list[Call]
    closing: Turn | None
    pos: int = 0
    last: list[str | Call] = field(default_factory=list)  # the blocks answered last


def _draw(*parts: object) -> float:
    """A number in [0, 1) from the parts alone (no global random state)."""
    digest = hashlib.sha256("\x00".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64



def scripted_turns(script: Script, key: str, attempt: int) -> tuple[list[Turn], Turn | None]:
    """The script's working turns and closing turn of attempt `attempt` (1, 2, ...):
    attempts are split at each turn without a tool call."""
    groups: list[list[Turn]] = [[]]
    for n in range(1, 400):
        turn = script.turn_for(key, n)
        if turn is None:
            break
        groups[-1].append(turn)
        if not any(b.tool_use for b in turn.content):
            if len(groups) == attempt:
                break
            groups.append([])
    group = groups[attempt - 1] if len(groups) >= attempt else []
    closing = group[-1] if group and not any(b.tool_use for b in group[-1].content) else None
    return [t for t in group if t is not closing], closing

def plan_attempt(script: Script, options: ImperfectOptions, key: str, attempt: int, t0: int,
                 tools: dict[Any, Any]) -> Attempt:
    """The attempt's turns as this model plays them, its slips drawn per working turn
    from (seed, session key, the attempt's first turn, the working turn, the slip)."""
    work, closing = scripted_turns(script, key, attempt)
    planned = Attempt([], [], [Call.of(b.tool_use) for t in work for b in t.content
                               if b.tool_use], closing)
    for w, scripted in enumerate(work):
        def slipped(kind: SlipKind, w: int = w) -> bool:
            return _draw(options.seed, key, t0, w, kind) < options.rate_of(kind)

        blocks: list[str | Call] = [
            b.text if b.text is not None else Call.of(b.tool_use)  # type: ignore[arg-type]
            for b in scripted.content
        ]
        calls = [b for b in blocks if isinstance(b, Call)]
        writes = [c for c in calls if c.name == "Write"]
        latency = scripted.latency_ms
        if slipped("long_text"):
            planned.turns.append(Played([_ramble(key, t0, w)], "max_tokens", latency))
        test_tool = next((t for t in TEST_TOOLS if t in tools), None)
        if slipped("tests_first") and test_tool and writes:
            planned.turns.append(Played(["First I run the tests as they are.",
                                         Call(test_tool, {}, {})], None, latency))
        if key.startswith("coder.") and attempt == 1 and slipped("wrong_fix"):
            _mutate(writes, slips.wrong_fix)
        if slipped("weak_test"):
            _mutate(writes, slips.weak_test)
        if slipped("forget_bookkeeping"):
            kinds = [k for k in BOOKKEEPING if any(c.name == k for c in calls)]
            if kinds:
                gone = kinds[int(_draw(options.seed, key, t0, w, "which") * len(kinds))]
                blocks = [b for b in blocks if not (isinstance(b, Call) and b.name == gone)]
        if slipped("bad_arguments"):
            _break_one(blocks, tools, _draw(options.seed, key, t0, w, "arg"))
        if slipped("early_end") and sum(isinstance(b, Call) for b in blocks) >= 2:
            cut = _cut(blocks, _draw(options.seed, key, t0, w, "cut"))
            planned.turns.append(Played(blocks[:cut], None, latency))
            planned.turns.append(Played(["That should be everything for this unit."]))
            planned.rest = [b for b in blocks[cut:] if isinstance(b, Call)]
            planned.rest += [Call.of(b.tool_use) for t in work[w + 1:] for b in t.content
                             if b.tool_use]
            break
        planned.turns.append(Played(blocks, None, latency))
        if slipped("repeat_edit") and writes:
            again = writes[0].right()
            planned.turns.append(Played([f"Writing {again.sent.get('path')} again.", again],
                                        None, latency))
    return planned


def _mutate(writes: list[Call], edit: Any) -> None:
    """Apply a content slip to the first written file it changes (the model means it)."""
    for call in writes:
        path, content = call.sent.get("path"), call.sent.get("content")
        if isinstance(path, str) and isinstance(content, str):
            changed = edit(path, content)
            if changed is not None:
                call.sent = call.meant = {**call.sent, "content": changed}
                return


def _break_one(blocks: list[str | Call], tools: dict[Any, Any], draw: float) -> None:
    """Send one call whose tool requires a field with that field missing or mistyped."""
    candidates = []
    for block in blocks:
        if isinstance(block, Call):
            schema = (tools.get(block.name) or {}).get("input_schema") or {}
            if slips.malformed(block.sent, schema, True) is not None:
                candidates.append((block, schema))
    if not candidates:
        return
    call, schema = candidates[int(draw * len(candidates))]
    bad = slips.malformed(call.sent, schema, missing=draw * len(candidates) % 1 < 0.5)
    if bad is not None:
        call.sent = bad


def _cut(blocks: list[str | Call], draw: float) -> int:
    """Where an early end stops: after one call at least, before the last."""
    at = [i + 1 for i, b in enumerate(blocks) if isinstance(b, Call)][:-1]
    return at[int(draw * len(at))]


def _ramble(key: str, t0: int, w: int) -> str:
    """An over-long answer, cut at the output limit (the same words for the same turn)."""
    thoughts = (
        "Let me think about the whole design again before I touch anything.",
        "The contract names the exports; the acceptance criteria say what each returns.",
        "There might be edge cases with the inputs, and the upstream units matter too.",
        "Before writing I should consider how the tests will call this code.",
        "Maybe a different structure would be cleaner, but the smallest change is best.",
    )
    out: list[str] = []
    i = 0
    while sum(len(s) + 1 for s in out) < LONG_TEXT_CHARS:
        out.append(thoughts[int(_draw(key, t0, w, "ramble", i) * len(thoughts))])
        i += 1
    return " ".join(out)
