"""A scripted assistant turn and its parts: the data every script form comes down to."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from devloop.llm.base import StopReason

FaultKind = Literal[
    "rate_limit", "overloaded", "server_error", "drop", "malformed_tool_input", "unknown_tool",
    "authentication", "unknown_model", "invalid_request",
]
HTTP_FAULTS = frozenset(
    {"rate_limit", "overloaded", "server_error", "drop", "authentication", "unknown_model",
     "invalid_request"}
)


class Strict(BaseModel):
    """Frozen, and no key it does not know."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ToolUse(Strict):
    """A tool call the scripted model makes."""

    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class Block(Strict):
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


class Fault(Strict):
    """An injected failure, served the first `times` times this (session, turn) is asked."""

    kind: FaultKind
    times: int = Field(default=1, ge=1)
    retry_after: float = Field(default=0, ge=0)  # seconds, sent on rate_limit and overloaded

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `fault: rate_limit` is short for `fault: {kind: rate_limit}`.
        return {"kind": value} if isinstance(value, str) else value


class Turn(Strict):
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
