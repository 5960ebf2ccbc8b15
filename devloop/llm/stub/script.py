"""The stub's script: scripted assistant turns keyed by session key pattern and turn number.

The format is documented with examples in docs/stub-script.md. A script is loaded from
a YAML file (errors name the line) or from a dict (tests build scripts inline). Sessions are
written out one by one (`sessions:`) or once for many (`templates:` filled from the session
key and the `units:` table, one turn at a time as requests ask for it: template.py and
bound.py). A turn and its parts are turn.py's.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError

from devloop.llm.stub.bound import Bound, Template, bind, filled, template_problems
from devloop.llm.stub.imperfect import ImperfectOptions
from devloop.llm.stub.template import UNIT, pick
from devloop.llm.stub.turn import (
    HTTP_FAULTS,
    Block,
    Fault,
    FaultKind,
    Strict,
    ToolUse,
    Turn,
    TurnNumber,
)
from devloop.llm.stub.yamlmarks import ScriptInvalid, problems_from_validation, read_yaml

__all__ = ["HTTP_FAULTS", "Block", "CacheOptions", "Fault", "FaultKind", "Script", "Session",
           "Template", "ToolUse", "Turn"]


class Session(Strict):
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


class CacheOptions(Strict):
    """Prompt-cache knobs."""

    min_tokens: int = Field(default=0, ge=0)  # prefixes shorter than this are never written


class Script(Strict):
    """A whole stub script."""

    sessions: dict[str, Session] = Field(default_factory=dict)
    default: Turn | None = None
    cache: CacheOptions = Field(default_factory=CacheOptions)
    # Answer with this model id whatever was asked, as a proxy that rewrites it would.
    answer_model: str | None = None
    # Play the turns as the seeded imperfect model does (imperfect.py), not as written.
    imperfect: ImperfectOptions | None = None
    templates: dict[str, Template] = Field(default_factory=dict)
    units: dict[str, dict[str, Any]] = Field(default_factory=dict)  # unit id -> its values
    _bound: list[Bound] | None = PrivateAttr(default=None)

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
            found = filled(*matched, turn, session_key)
        return found if found is not None else self.default

    def bound(self) -> list[Bound]:
        """The templates compiled, in file order (ValueError for a pattern that cannot be)."""
        if self._bound is None:
            self._bound = [bind(p, t) for p, t in self.templates.items()]
        return self._bound

    def _template_for(self, session_key: str) -> tuple[Bound, dict[str, Any]] | None:
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
    problems = template_problems(script.templates, script.units, source, lines)
    if problems:
        raise ScriptInvalid(problems)
    return script
