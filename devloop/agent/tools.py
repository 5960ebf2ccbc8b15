"""Tools as small objects: a name, an input model, words for the model, and `execute`.

A tool never raises for an expected failure: it returns a ToolResult with
`is_error=True`, which the loop hands back to the model as an observation.
"""

from __future__ import annotations

import difflib
import json
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from devloop.agent.stuck import TestTally
from devloop.core.writeset import allowed
from devloop.llm.base import ToolSpec
from devloop.safe.owned import OwnedFile, OwnedFiles
from devloop.safe.safedir import Dir
from devloop.sandbox import Sandbox


@dataclass(frozen=True)
class ToolResult:
    """What a tool call produced: text for the model, and structured data for the runtime."""

    text: str
    is_error: bool = False
    data: dict[str, Any] | None = None
    # Whether `text` carries untrusted content (file contents, command output) to wrap.
    untrusted: bool = False
    changed_files: tuple[str, ...] = ()
    created_files: tuple[str, ...] = ()  # of changed_files, those that did not exist
    tests: TestTally | None = None  # a test run's outcome (stuck detection, best state)
    # Set when the call failed for the infrastructure's sake (a package install timed out):
    # the session ends to be run again, and it is not the model's failure.
    infra_flake: str | None = None


@dataclass(frozen=True)
class ProgressEvent:
    """Progress a session reports (the worker turns these into Celery events)."""

    kind: str  # "todo" | "runtime_state" | "timeline" | "turn" | "tool" | "tests"
    step: int | None = None
    total: int | None = None
    turn: int | None = None
    tokens: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    note: str | None = None  # what slows the session down ("" clears it), e.g. a busy machine


@dataclass
class ToolContext:
    """Where a session's tools act: the view, its write set, its sandbox, its services."""

    view: Path
    unit_id: str
    role: str
    write_patterns: tuple[str, ...]
    sandbox: Sandbox | None = None
    ro_binds: Sequence[tuple[Path, str]] = ()
    tmpfs: Sequence[str] = ()
    command_timeout_s: float = 600.0
    read_cap_bytes: int = 256 * 1024
    emit: Callable[[ProgressEvent], None] = lambda event: None
    # Role services (ledgers, runner, units registry ...), keyed by name; see devloop.roles.
    services: dict[str, Any] = field(default_factory=dict)
    # The handle every tool reaches the view through (the workspace's, or opened on use).
    handle: Dir | None = field(default=None, repr=False)
    # The view's tool-owned files (the workspace's): only their tools may write them.
    owned_files: OwnedFiles = field(default_factory=OwnedFiles)

    @property
    def files(self) -> Dir:
        """The view's handle: paths beneath it resolve without following any link."""
        if self.handle is None:
            self.handle = Dir.open(self.view)
        return self.handle

    @property
    def unit_rel(self) -> str:
        """The unit dir relative to the view: every tool's working directory."""
        return f"units/{self.unit_id}"

    @property
    def unit_dir(self) -> Path:
        """The unit dir on the host (what the sandbox binds; host code uses `files`)."""
        return self.view / self.unit_rel

    def resolve(self, path: str) -> tuple[str, str] | str:
        """A unit-relative path as (view-relative, unit-relative), or why it is refused.

        Only `..` is resolved here, as text; links are refused when the path is used
        (beneath `files`), so a link planted in the view leads nowhere.
        """
        if not path or "\x00" in path:
            return "empty or invalid path"
        pure = PurePosixPath(path)
        if pure.is_absolute():
            return f"{path}: absolute paths are not allowed; use a path relative to {self.unit_rel}"
        joined = PurePosixPath(self.unit_rel) / pure
        parts: list[str] = []
        for part in joined.parts:
            if part == "..":
                if not parts:
                    return f"{path}: outside the view"
                parts.pop()
            elif part != ".":
                parts.append(part)
        view_rel = "/".join(parts)
        prefix = self.unit_rel + "/"
        unit_relative = view_rel[len(prefix) :] if view_rel.startswith(prefix) else "../" + view_rel
        return view_rel, unit_relative

    def may_write(self, unit_relative: str) -> bool:
        """Whether the role may write this unit-relative path."""
        return allowed(unit_relative, self.write_patterns)

    def owner_of(self, unit_relative: str) -> OwnedFile | None:
        """The record of a tool-owned file at (or above) this path, or None."""
        holder = self.owned_files.holder(unit_relative)
        return self.owned_files.get(holder) if holder is not None else None

    def record_binds(self) -> list[tuple[Path, str]]:
        """Read-only binds of each tool-owned file over itself, for a command's sandbox.

        Only regular files are bound, checked beneath the view's handle (bubblewrap
        follows links in what it binds); the workspace judges the rest when it collects.
        """
        binds = []
        for rel, _ in self.owned_files:
            path = f"{self.unit_rel}/{rel}"
            try:
                st = self.files.lstat(path)
            except OSError:
                continue
            if st is not None and stat.S_ISREG(st.st_mode):
                binds.append((self.view / path, path))
        return binds


class Tool:
    """Base of every tool: subclasses set name, description, Input and `run`."""

    name: ClassVar[str]
    description: ClassVar[str]
    Input: ClassVar[type[BaseModel]]
    writes: ClassVar[bool] = False

    def spec(self, available: frozenset[str] | None = None) -> ToolSpec:
        """The tool as the model sees it, among the `available` tools of a role (built once
        per tool class and description: it is sent every turn)."""
        kind, text = type(self), self.describe(available)
        if (kind, text) not in _SPECS:
            _SPECS[kind, text] = _spec_of(kind, text)
        return _SPECS[kind, text]

    def describe(self, available: frozenset[str] | None) -> str:
        """The description for a role with these tools (None: every tool); a tool whose
        text names another tool overrides this, so no role reads of a tool it lacks."""
        return self.description

    def execute(self, ctx: ToolContext, raw: Any) -> ToolResult:
        """Validate the model's input, then run; invalid input is an error observation that
        names each problem and the input's shape, so the next call can be right."""
        if not isinstance(raw, dict):
            return ToolResult(
                f"invalid input for {self.name}: expected a JSON object. {self.fix()}", True
            )
        try:
            args = self.Input.model_validate(raw)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in errors
            )
            named = [str(e["loc"][0]) for e in errors if e["loc"]]
            return ToolResult(
                f"invalid input for {self.name}: {problems}. {self.fix(named)}", True
            )
        return self.run(ctx, args)

    def fix(self, named: Sequence[str] = ()) -> str:
        """How to call the tool right: what each named field is, the input's shape
        (required fields first) and an example to copy."""
        schema = self.spec().input_schema
        props: dict[str, Any] = schema.get("properties", {})
        fields = []
        for n in dict.fromkeys(named):
            if n not in props:
                continue
            kind = call_shape(props[n], schema.get("$defs"))
            said = props[n].get("description")
            # An object's shape is the input's own, given whole just after.
            about = [] if kind.startswith("{") else [f"{n} is {kind}"]
            about += [f"({said})" if about else f"{n}: {said}"] if said else []
            if about:
                fields.append(" ".join(about))
        shape = call_shape(schema)
        optional = " (a field with ? may be left out)" if "?:" in shape else ""
        example = json.dumps(call_example(schema), ensure_ascii=False)
        return (
            "Fix: " + "".join(f"{f}; " for f in fields)
            + f"call {self.name} again with input shaped {shape}{optional}, e.g. {example}."
        )

    def run(self, ctx: ToolContext, args: Any) -> ToolResult:
        """Do the work (subclasses)."""
        raise NotImplementedError


_SPECS: dict[tuple[type[Tool], str], ToolSpec] = {}


def _spec_of(tool: type[Tool], description: str) -> ToolSpec:
    schema = tool.Input.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
    return ToolSpec(name=tool.name, description=description, input_schema=schema)


def call_shape(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> str:
    """A JSON schema as a short shape the model can copy: `{path: string, limit?: integer}`."""
    defs = schema.get("$defs", defs) or {}
    if "$ref" in schema:
        return call_shape(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs)
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    options = [o for o in schema.get("anyOf", []) if o.get("type") != "null"]
    if options:
        return " | ".join(call_shape(o, defs) for o in options)
    kind = schema.get("type")
    if kind == "array":
        return f"[{call_shape(schema.get('items', {}), defs)}]"
    if kind == "object" and "properties" in schema:
        props: dict[str, Any] = schema["properties"]
        required = [n for n in props if n in schema.get("required", [])]
        optional = [n for n in props if n not in required]
        fields = [f"{n}: {call_shape(props[n], defs)}" for n in required]
        fields += [f"{n}?: {call_shape(props[n], defs)}" for n in optional]
        return "{" + ", ".join(fields) + "}"
    return str(kind or "any")


_EG = re.compile(r"\be\.g\.,? (\S+?)[.,;)]?(?:\s|$)")


def call_example(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A JSON value of a schema with its required fields only: a field's own example (the
    `e.g.` of its description) or its default where it has one, else a placeholder."""
    defs = schema.get("$defs", defs) or {}
    if "$ref" in schema:
        return call_example(defs.get(schema["$ref"].rsplit("/", 1)[-1], {}), defs)
    if "enum" in schema:
        return schema["enum"][0]
    options = [o for o in schema.get("anyOf", []) if o.get("type") != "null"]
    if options:
        return call_example(options[0], defs)
    kind = schema.get("type")
    if kind == "object":
        props: dict[str, Any] = schema.get("properties", {})
        return {n: call_example(props[n], defs) for n in schema.get("required", [])
                if n in props}
    if kind == "array":
        return [call_example(schema.get("items", {}), defs)]
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    said = _EG.search(schema.get("description", ""))
    if kind == "string":
        return said[1] if said else "..."
    return {"integer": 1, "number": 1, "boolean": True}.get(str(kind), "...")


class Toolset:
    """The tools one flavor may see and call: nothing else is listed or executable."""

    def __init__(self, flavor: str, allowlist: Iterable[str], tools: Iterable[Tool]) -> None:
        self.flavor = flavor
        self.allowlist = tuple(allowlist)
        available = {t.name: t for t in tools}
        missing = [n for n in self.allowlist if n not in available]
        if missing:
            raise ValueError(f"flavor {flavor!r} allows tools that are not built: {missing}")
        self.tools = {n: available[n] for n in self.allowlist}

    def names(self) -> list[str]:
        """Tool names in allowlist order."""
        return list(self.tools)

    def specs(self) -> list[ToolSpec]:
        """What the model is shown."""
        available = frozenset(self.tools)
        return [t.spec(available) for t in self.tools.values()]

    def execute(self, ctx: ToolContext, name: str, raw: Any) -> ToolResult:
        """Run an allowed tool; anything else is a denied observation, never executed."""
        tool = self.tools.get(name)
        if tool is None:
            close = difflib.get_close_matches(str(name), list(self.tools), n=1)
            meant = f"; did you mean {close[0]}?" if close else ""
            return ToolResult(
                f"denied: tool {name!r} is not available to the {self.flavor} role{meant} "
                f"available tools: {', '.join(self.tools)}",
                is_error=True,
                data={"denied": name},
            )
        return tool.execute(ctx, raw)
