"""The stub's script: scripted assistant turns keyed by session key pattern and turn number.

The format is documented with examples in docs/stub-script.md. A script is loaded from
a YAML file (errors name the line) or from a dict (tests build scripts inline).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from devloop.llm.base import StopReason
from devloop.llm.stub.yamlmarks import ScriptInvalid, problems_from_validation, read_yaml

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
        if n in self.turns:
            return self.turns[n]
        last = max(self.turns, default=0)
        if self.repeat and n > last:
            return self.repeat[(n - last - 1) % len(self.repeat)]
        return self.default


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
        """Read a script file."""
        path = Path(path)
        return cls.from_yaml(path.read_text(encoding="utf-8"), str(path))

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
        else None."""
        session = self.session_for(session_key)
        if session is not None:
            found = session.turn(turn)
            if found is not None:
                return found
        return self.default


def _validate(data: Any, source: str, lines: dict[tuple[str, ...], int]) -> Script:
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
        return Script.model_validate(data)
    except ValidationError as exc:
        raise ScriptInvalid(problems_from_validation(exc, source, lines, Script)) from None
