"""YAML with line numbers, and script errors that name the line, the field and the fix."""

from __future__ import annotations

import contextlib
import gc
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from devloop.core.errors import DevLoopError, Problem
from devloop.core.yamlindent import described, misindented

Path = tuple[str, ...]
DOCS = "docs/stub-script.md"


class ScriptInvalid(DevLoopError):
    """A stub script has problems; `problems` lists each with its line and fix."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))

    @classmethod
    def one(
        cls, source: str, line: int | None, field: str, message: str, fix: str
    ) -> ScriptInvalid:
        """A ScriptInvalid with a single problem."""
        return cls([Problem(where(source, line), field, message, fix)])


def where(source: str, line: int | None) -> str:
    """`file:line`, or the file alone without a line."""
    return f"{source}:{line}" if line else source


# libyaml's parser where PyYAML was built with it (the pure-Python one is ~20x slower).
FAST_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"


class _DuplicateKey(DevLoopError):
    """A mapping repeats a key; the slow path finds where, with its path."""


class _Loader(FAST_LOADER):  # type: ignore[valid-type,misc]
    """The fast safe loader, refusing a repeated key (PyYAML silently keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [k.value for k, _ in node.value
                if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE]
        if len(set(keys)) != len(keys):
            raise _DuplicateKey
        return super().construct_mapping(node, deep)


class Marks(Mapping[Path, int]):
    """The 1-based line of every path in a YAML text, worked out on first use: only a script
    or spec with a problem pays for a walk over every node."""

    def __init__(self, text: str, source: str) -> None:
        self._text, self._source = text, source
        self._lines: dict[Path, int] | None = None

    @property
    def computed(self) -> bool:
        """Whether the lines were worked out (someone asked for one)."""
        return self._lines is not None

    def _computed(self) -> dict[Path, int]:
        if self._lines is None:
            # The text parsed already: compose it again, as fast, for the nodes' marks.
            _, self._lines = _read_marked(self._text, self._source, FAST_LOADER)
        return self._lines

    def __getitem__(self, path: Path) -> int:
        return self._computed()[path]

    def __iter__(self) -> Iterator[Path]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())


def read_yaml(text: str, source: str) -> tuple[Any, Mapping[Path, int]]:
    """Parse YAML; return the data and the 1-based line of every path in it (computed when
    first asked for). Errors name the line, as ScriptInvalid."""
    try:
        with _collector_paused():
            data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a safe loader)
        return data, Marks(text, source)
    except (yaml.YAMLError, _DuplicateKey):
        pass  # the pure-Python parser says what is wrong and where, in PyYAML's words
    return _read_marked(text, source)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a document is built: every container the loader
    makes is new and alive, so each collection rescans them all for nothing (more than half
    the CPU of a 10,000-unit script's parse, and growing faster than the script)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_marked(
    text: str, source: str, loader_class: type[yaml.SafeLoader] = yaml.SafeLoader
) -> tuple[Any, dict[Path, int]]:
    """Parse (PyYAML's own parser by default, for its messages), walking every node for its
    line."""
    try:
        loader = loader_class(text)
        try:
            node = loader.get_single_node()
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        misindent = misindented(text, line) if line else None
        if misindent is not None:  # not "mapping values are not allowed": the indentation
            raise ScriptInvalid.one(source, line, misindent.key,
                                    *described(misindent, ())) from None
        raise ScriptInvalid.one(
            source, line, "(yaml)", str(exc.problem or exc), "fix the YAML syntax on that line"
        ) from None
    lines: dict[Path, int] = {}
    if node is not None:
        _walk(node, (), lines, source, yaml.constructor.SafeConstructor())
    return data, lines


def _walk(
    node: yaml.Node, path: Path, lines: dict[Path, int], source: str,
    keys: yaml.constructor.SafeConstructor,
) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(keys.construct_object(key_node))
            if key in seen:
                # PyYAML silently keeps the last duplicate; a script author never means that.
                raise ScriptInvalid.one(
                    source,
                    key_node.start_mark.line + 1,
                    dotted(path + (key,)),
                    "duplicate key",
                    "merge the two entries or rename one",
                )
            seen.add(key)
            lines[path + (key,)] = key_node.start_mark.line + 1
            _walk(value_node, path + (key,), lines, source, keys)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, path + (str(i),), lines, source, keys)


def dotted(path: typing.Sequence[Any]) -> str:
    """A path as a person reads it: sessions."coder.*".turns[2].content[0].text"""
    out = ""
    for seg in path:
        if isinstance(seg, int) or (isinstance(seg, str) and seg.isdigit()):
            out += f"[{seg}]"
        elif isinstance(seg, str) and seg.replace("_", "").isalnum():
            out += f".{seg}" if out else seg
        else:
            out += f'."{seg}"' if out else f'"{seg}"'
    return out or "(top level)"


def line_of(loc: Path, lines: Mapping[Path, int]) -> int | None:
    """The line of loc, else of the nearest enclosing path that has one."""
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that holds the field at loc (for listing its allowed keys)."""
    current: Any = root
    for seg in loc:
        while True:  # unwrap Optional[...], list[...], dict[..., X] down to a model
            origin = typing.get_origin(current)
            if origin in (typing.Union, types.UnionType):
                args = [a for a in typing.get_args(current) if a is not type(None)]
                current = args[0]
            elif origin is typing.Annotated:
                current = typing.get_args(current)[0]
            else:
                break
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(seg))
            if field is None:
                return current
            current = field.annotation
        elif typing.get_origin(current) in (list, dict):
            current = typing.get_args(current)[-1]
        else:
            return None
    return None


def _fix(err: ErrorDetails, root: type[BaseModel]) -> str:
    kind = err["type"]
    loc = tuple(s for s in err["loc"] if s != "[key]")
    if kind == "missing":
        return f"add `{loc[-1]}`"
    if kind == "extra_forbidden":
        model = _model_at(root, loc)
        allowed = ", ".join(model.model_fields) if model else ""
        return f"remove `{loc[-1]}` or fix its spelling" + (
            f"; allowed here: {allowed}" if allowed else ""
        )
    if kind == "literal_error":
        return "use one of the values listed"
    if "[key]" in err["loc"] or (kind.startswith("int_") and len(loc) >= 2 and loc[-2] == "turns"):
        return "number turns 1, 2, 3, ... (the turn a request is on = its assistant messages + 1)"
    if kind in ("greater_than_equal", "greater_than", "too_short"):
        return "use a larger value"
    return f"see {DOCS}"


def problems_from_validation(
    exc: ValidationError, source: str, lines: Mapping[Path, int], root: type[BaseModel],
    place: typing.Callable[[Path], Path] = lambda loc: loc,
) -> list[Problem]:
    """One Problem per pydantic error, located by the YAML marks, in line order (`place`:
    where in the file the validated data's loc is, when it is part of the file)."""
    found = []
    for err in exc.errors(include_url=False):
        loc = place(tuple(str(s) for s in err["loc"] if s != "[key]"))
        # Our own validators phrase their message as "what is wrong; fix: what to do".
        message, _, fix = err["msg"].removeprefix("Value error, ").partition("; fix: ")
        line = line_of(loc, lines)
        problem = Problem(where(source, line), dotted(loc), message, fix or _fix(err, root))
        found.append((line or 0, problem))
    return [problem for _, problem in sorted(found, key=lambda pair: pair[0])]
