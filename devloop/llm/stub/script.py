"""The stub's script: scripted assistant turns keyed by session key pattern and turn number.

The format is documented with examples in docs/stub-script.md. A script is loaded from
a YAML file (errors name the line) or from a dict (tests build scripts inline). Sessions are
written out one by one (`sessions:`) or once for many (`templates:` filled from the session
key and the `units:` table, one turn at a time as requests ask for it: template.py).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path
from re import Pattern
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from devloop.errors import Problem
from devloop.llm.base import StopReason
from devloop.llm.stub.template import (
    UNIT,
    Loc,
    TemplateError,
    expand,
    key_regex,
    origin_of,
    pick,
    uses,
)
from devloop.llm.stub.yamlmarks import (
    ScriptInvalid,
    dotted,
    line_of,
    problems_from_validation,
    read_yaml,
    where,
)

FaultKind = Literal[
    "rate_limit", "overloaded", "server_error", "drop", "malformed_tool_input", "unknown_tool",
    "authentication", "unknown_model", "invalid_request",
]
HTTP_FAULTS = frozenset(
    {"rate_limit", "overloaded", "server_error", "drop", "authentication", "unknown_model",
     "invalid_request"}
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolUse(_Strict):
    """A tool call the scripted model makes."""

    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class Block(_Strict):
    """One content block: exactly one of `text` or `tool_use`."""

    text: str | None = None
    tool_use: ToolUse | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Block:
        if (self.text is None) == (self.tool_use is None):
            raise ValueError(
                "a content block needs exactly one of `text` or `tool_use`; "
                "fix: write `- text: ...` or `- tool_use: {name: ..., input: {...}}`"
            )
        return self


class Fault(_Strict):
    """An injected failure, served the first `times` times this (session, turn) is asked."""

    kind: FaultKind
    times: int = Field(default=1, ge=1)
    retry_after: float = Field(default=0, ge=0)  # seconds, sent on rate_limit and overloaded

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `fault: rate_limit` is short for `fault: {kind: rate_limit}`.
        return {"kind": value} if isinstance(value, str) else value


class Turn(_Strict):
    """One scripted assistant turn."""

    content: list[Block] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    stop_sequence: str | None = None
    latency_ms: int = Field(default=0, ge=0)
    fault: Fault | None = None

    @field_validator("stop_sequence")
    @classmethod
    def _stop_sequence_needs_reason(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("stop_reason") != "stop_sequence":
            raise ValueError(
                "`stop_sequence` is only meaningful with `stop_reason: stop_sequence`; "
                "fix: add `stop_reason: stop_sequence` or remove `stop_sequence`"
            )
        return value

    def resolved_stop_reason(self, has_tool_use: bool) -> StopReason:
        """The scripted stop reason, else tool_use when a tool is called, else end_turn."""
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if has_tool_use else "end_turn"


TurnNumber = Annotated[int, Field(ge=1)]


class Session(_Strict):
    """The turns of every session whose key matches this entry's pattern."""

    turns: dict[TurnNumber, Turn] = Field(default_factory=dict)
    # Served in order, round and round, for every turn past the highest numbered one: a
    # conversation that goes on over later attempts, however many turns came before.
    repeat: list[Turn] = Field(default_factory=list)
    default: Turn | None = None

    def turn(self, n: int) -> Turn | None:
        """Turn n: numbered, else from `repeat` past the numbered ones, else the default."""
        picked = pick(self.turns, self.repeat, self.default, n)
        return None if picked is None else picked[1]


class Template(_Strict):
    """A session entry written once for every session key its pattern matches: the turns
    are left as data until a request fills one in."""

    turns: dict[TurnNumber, Any] = Field(default_factory=dict)
    repeat: list[Any] = Field(default_factory=list)
    default: Any = None

    def entries(self) -> list[tuple[Loc, Any]]:
        """Every turn, with its path in the entry."""
        found: list[tuple[Loc, Any]] = [(("turns", str(n)), t) for n, t in self.turns.items()]
        found += [(("repeat", str(i)), t) for i, t in enumerate(self.repeat)]
        return found + ([(("default",), self.default)] if self.default is not None else [])


@dataclass(frozen=True)
class _Bound:
    """A template ready to match: its pattern compiled, the row names it needs."""

    pattern: str
    regex: Pattern[str]
    template: Template
    row_names: frozenset[str]  # values it takes from the unit's row of `units:`


class CacheOptions(_Strict):
    """Prompt-cache knobs."""

    min_tokens: int = Field(default=0, ge=0)  # prefixes shorter than this are never written


class Script(_Strict):
    """A whole stub script."""

    sessions: dict[str, Session] = Field(default_factory=dict)
    default: Turn | None = None
    cache: CacheOptions = Field(default_factory=CacheOptions)
    # Answer with this model id whatever was asked, as a proxy that rewrites it would.
    answer_model: str | None = None
    templates: dict[str, Template] = Field(default_factory=dict)
    units: dict[str, dict[str, Any]] = Field(default_factory=dict)  # unit id -> its values
    _bound: list[_Bound] | None = PrivateAttr(default=None)

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> Script:
        """Validate a script given as plain data; errors name the field and the fix."""
        return _validate(data, source, {})

    @classmethod
    def from_yaml(cls, text: str, source: str = "<yaml>") -> Script:
        """Parse and validate YAML text; errors name `source:line`, the field and the fix."""
        data, lines = read_yaml(text, source)
        return _validate(data, source, lines)

    @classmethod
    def load(cls, path: str | Path) -> Script:
        """Read a script file. The same bytes are parsed once per process: `devloop run`
        checks the script before it starts anything, then serves it."""
        global _last_loaded
        raw = Path(path).read_bytes()
        key = hashlib.sha256(raw).digest()  # a Script holds nothing of the path it came from
        with _load_lock:
            if _last_loaded is not None and _last_loaded[0] == key:
                return _last_loaded[1]
        script = cls.from_yaml(raw.decode("utf-8"), str(path))
        with _load_lock:
            _last_loaded = (key, script)
        return script

    def session_for(self, session_key: str) -> Session | None:
        """The exact entry for session_key, else the first pattern (file order) matching it."""
        if session_key in self.sessions:
            return self.sessions[session_key]
        for pattern, session in self.sessions.items():
            if fnmatchcase(session_key, pattern):
                return session
        return None

    def turn_for(self, session_key: str, turn: int) -> Turn | None:
        """The session's turn (numbered, repeated, its default), else the script's default,
        else None. Sessions first, then the first template that matches the key."""
        session = self.session_for(session_key)
        found = None
        if session is not None:
            found = session.turn(turn)
        elif (matched := self._template_for(session_key)) is not None:
            found = _filled(*matched, turn, session_key)
        return found if found is not None else self.default

    def bound(self) -> list[_Bound]:
        """The templates compiled, in file order (ValueError for a pattern that cannot be)."""
        if self._bound is None:
            self._bound = [_bind(p, t) for p, t in self.templates.items()]
        return self._bound

    def _template_for(self, session_key: str) -> tuple[_Bound, dict[str, Any]] | None:
        """The first template matching the key (one that needs a row: only for a unit that
        has one), with its values: the row, then the captured parts."""
        for bound in self.bound():
            match = bound.regex.match(session_key)
            if match is None:
                continue
            captured = match.groupdict()
            if not bound.row_names:
                return bound, captured
            row = self.units.get(captured.get(UNIT, ""))
            if row is not None:
                return bound, {**row, **captured}
        return None


_load_lock = threading.Lock()
_last_loaded: tuple[bytes, Script] | None = None


def _bind(pattern: str, template: Template) -> _Bound:
    regex = key_regex(pattern)
    captured = set(regex.groupindex)
    names = {use.name for _, turn in template.entries() for use in uses(turn)}
    return _Bound(pattern, regex, template, frozenset(names - captured))


def _filled(bound: _Bound, values: dict[str, Any], n: int, session_key: str) -> Turn | None:
    """Turn n of the template, filled in with values (ScriptInvalid naming the template's
    field when the values do not make a valid turn)."""
    template = bound.template
    picked = pick(template.turns, template.repeat, template.default, n)
    if picked is None:
        return None
    loc, raw = picked
    try:
        return Turn.model_validate(expand(raw, values, loc))
    except (TemplateError, ValidationError):
        problems = _turn_problems(bound.pattern, loc, raw, values, "stub script", {},
                                  f" (session {session_key!r})")
        raise ScriptInvalid(problems) from None


def _turn_problems(
    pattern: str, loc: Loc, raw: Any, values: Mapping[str, Any], source: str,
    lines: Mapping[Loc, int], note: str,
) -> list[Problem]:
    """What is wrong with one template turn filled in with values (empty: nothing); `note`
    follows each message (which values)."""
    base = ("templates", pattern, *loc)
    origins: dict[Loc, Loc] = {}
    try:
        Turn.model_validate(expand(raw, values, (), (), origins))
    except TemplateError as exc:
        path = (*base, *exc.loc)
        return [Problem(where(source, line_of(path, lines)), dotted(path), exc.message + note,
                        exc.fix)]
    except ValidationError as exc:
        found = problems_from_validation(
            exc, source, lines, Turn, place=lambda at: (*base, *origin_of(at, origins)))
        # An `each` item that fails fails once per entry: say it once.
        return list(dict.fromkeys(replace(p, message=p.message + note) for p in found))
    return []


MAX_ROW_PROBLEMS = 10  # per template: a generated table wrong in one way is wrong everywhere


def _template_problems(script: Script, source: str, lines: Mapping[Loc, int]) -> list[Problem]:
    """Templates checked at load: patterns, names with a value for every unit, and each turn
    filled in for the first unit of the table (the rest are filled as requests come)."""
    found: list[Problem] = []

    def problem(path: Loc, message: str, fix: str) -> None:
        found.append(Problem(where(source, line_of(path, lines)), dotted(path), message, fix))

    for pattern, template in script.templates.items():
        here = ("templates", pattern)
        try:
            bound = _bind(pattern, template)
        except ValueError as exc:
            problem(here, f"the pattern cannot be used: {exc}", "capture each name once")
            continue
        captured = set(bound.regex.groupindex)
        if bound.row_names and UNIT not in captured:
            names = ", ".join(f"{{{{{n}}}}}" for n in sorted(bound.row_names))
            problem(here, f"uses {names}, which the pattern does not capture",
                    "capture the unit as `{unit}` in the pattern and give each unit these "
                    "values under `units:`, or capture them in the pattern")
            continue
        walked = {u.name for _, t in template.entries() for u in uses(t) if u.walked}
        rows = 0
        for unit, row in script.units.items() if bound.row_names else ():
            missing = sorted(bound.row_names - row.keys())
            bad = sorted(n for n in walked & row.keys() if not isinstance(row[n], dict | list))
            if (missing or bad) and rows < MAX_ROW_PROBLEMS:
                rows += 1
                if missing:
                    problem(("units", unit), f"has no {', '.join(missing)}, which "
                            f"templates.\"{pattern}\" uses", "add them to this unit's values")
                for name in bad:
                    problem(("units", unit, name), f"`each: {name}` needs a mapping or a list",
                            "give it entries (path: text), or a list")
        sample = next(iter(script.units.items()), None) if bound.row_names else None
        values = {name: name for name in captured}
        if sample is not None:
            values = {**sample[1], **values, UNIT: sample[0]}
        note = f" (filled in for unit {sample[0]!r})" if sample is not None else ""
        for loc, raw in template.entries():
            found += _turn_problems(pattern, loc, raw, values, source, lines, note)
    return sorted(found, key=_line)


def _line(problem: Problem) -> int:
    number = problem.file.rpartition(":")[2]
    return int(number) if number.isdigit() else 0


def _validate(data: Any, source: str, lines: Mapping[tuple[str, ...], int]) -> Script:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScriptInvalid.one(
            source,
            lines.get((), 1),
            "(top level)",
            "a script must be a mapping",
            "start with `sessions:` and/or `default:` (see docs/stub-script.md)",
        )
    try:
        script = Script.model_validate(data)
    except ValidationError as exc:
        raise ScriptInvalid(problems_from_validation(exc, source, lines, Script)) from None
    problems = _template_problems(script, source, lines)
    if problems:
        raise ScriptInvalid(problems)
    return script
