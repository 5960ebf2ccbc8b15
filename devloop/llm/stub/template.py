"""Session templates: turns written once for many sessions, filled in per session.

A template's key pattern captures parts of the session key (`coder.c-acme.p-shop.{unit}`);
its turns use `{{name}}` for a captured part or a value of the unit's row in the script's
`units:` table, and `{each: NAME, item: ...}` list items for one item per entry of a value.
Nothing is expanded at load: a request expands the one turn it asks for (docs/stub-script.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from devloop.core.errors import DevLoopError

Loc = tuple[str, ...]

PLACEHOLDER = re.compile(r"\{\{([A-Za-z_]\w*)\}\}", re.ASCII)
_KEY_PART = re.compile(r"\{([A-Za-z_]\w*)\}|\*|\?", re.ASCII)
UNIT = "unit"  # the captured part that picks the row of `units:`
LOOP = ("key", "value")  # what an `each` item sees of each entry
EACH = frozenset({"each", "item"})


class TemplateError(DevLoopError, ValueError):
    """A template cannot be filled: `loc` is where in the template, `fix` what to do."""

    def __init__(self, loc: Loc, message: str, fix: str) -> None:
        self.loc, self.message, self.fix = loc, message, fix
        super().__init__(f"{message}; fix: {fix}")


def key_regex(pattern: str) -> re.Pattern[str]:
    """The pattern as a regex: `{name}` captures one dot-free part, `*` any run, `?` one
    character, the rest literal (ValueError for a name captured twice)."""
    out, pos = [], 0
    for match in _KEY_PART.finditer(pattern):
        out.append(re.escape(pattern[pos : match.start()]))
        name = match.group(1)
        out.append(f"(?P<{name}>[^.]+)" if name else ".*" if match.group() == "*" else ".")
        pos = match.end()
    out.append(re.escape(pattern[pos:]))
    try:
        return re.compile("".join(out) + r"\Z", re.S)
    except re.error:
        raise ValueError("a part is captured twice") from None


def is_each(item: Any) -> bool:
    """A list item that stands for one item per entry of a value: `{each: NAME, item: ...}`."""
    return isinstance(item, dict) and item.keys() == EACH


@dataclass(frozen=True)
class Use:
    """A name a template uses, where, and whether `each` walks it."""

    name: str
    loc: Loc
    walked: bool


def uses(node: Any, loc: Loc = (), loop: bool = False) -> Iterator[Use]:
    """Every name the template data uses (`key`/`value` inside an `each` item excepted)."""
    if isinstance(node, str):
        for name in PLACEHOLDER.findall(node):
            if not (loop and name in LOOP):
                yield Use(name, loc, False)
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from uses(value, (*loc, str(key)), loop)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            if is_each(item):
                yield Use(str(item["each"]), (*loc, str(i), "each"), True)
                yield from uses(item["item"], (*loc, str(i), "item"), True)
            else:
                yield from uses(item, (*loc, str(i)), loop)


def _text(value: Any) -> str:
    """A value inside text: a scalar as written, a list's items (a mapping's keys) by ", "."""
    if isinstance(value, dict):
        return ", ".join(map(str, value))
    if isinstance(value, list):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _fill(text: str, values: Mapping[str, Any], loc: Loc) -> Any:
    whole = PLACEHOLDER.fullmatch(text)
    if whole is not None:  # the value itself, whatever its type
        return _value(whole.group(1), values, loc)
    if "{{" not in text:
        return text
    return PLACEHOLDER.sub(lambda m: _text(_value(m.group(1), values, loc)), text)


def _value(name: str, values: Mapping[str, Any], loc: Loc) -> Any:
    if name not in values:
        raise TemplateError(loc, f"`{{{{{name}}}}}` has no value here",
                            "capture it in the pattern or give every unit it under `units:`")
    return values[name]


def expand(
    node: Any, values: Mapping[str, Any], loc: Loc = (), out: Loc = (),
    origins: dict[Loc, Loc] | None = None,
) -> Any:
    """The template data filled in with values. With `origins`, record for each expanded
    list item (by its path in the result) the template path it came from."""
    if isinstance(node, str):
        return _fill(node, values, loc)
    if isinstance(node, dict):
        return {k: expand(v, values, (*loc, str(k)), (*out, str(k)), origins)
                for k, v in node.items()}
    if not isinstance(node, list):
        return node
    result: list[Any] = []
    for i, item in enumerate(node):
        here = (*loc, str(i))
        if not is_each(item):
            if origins is not None:
                origins[(*out, str(len(result)))] = here
            result.append(expand(item, values, here, (*out, str(len(result))), origins))
            continue
        for key, value in _entries(item["each"], values, (*here, "each")):
            if origins is not None:
                origins[(*out, str(len(result)))] = (*here, "item")
            inner = {**values, "key": key, "value": value}
            result.append(expand(item["item"], inner, (*here, "item"),
                                 (*out, str(len(result))), origins))
    return result


def _entries(name: Any, values: Mapping[str, Any], loc: Loc) -> list[tuple[Any, Any]]:
    source = _value(str(name), values, loc)
    if isinstance(source, dict):
        return list(source.items())
    if isinstance(source, list):
        return list(enumerate(source))
    kind = type(source).__name__
    raise TemplateError(loc, f"`each: {name}` needs a mapping or a list, not {kind}",
                        f"give `{name}` entries (path: text, or a list)")


def origin_of(loc: Loc, origins: Mapping[Loc, Loc]) -> Loc:
    """The template path of an expanded path: its longest recorded prefix, mapped, then the
    rest as it is."""
    for cut in range(len(loc), 0, -1):
        if loc[:cut] in origins:
            return (*origins[loc[:cut]], *loc[cut:])
    return loc


def pick(
    turns: Mapping[int, Any], repeat: list[Any], default: Any, n: int
) -> tuple[Loc, Any] | None:
    """Turn n: numbered, else from `repeat` past the numbered ones, else the default; with
    its path in the session entry (None when there is none)."""
    if n in turns:
        return ("turns", str(n)), turns[n]
    last = max(turns, default=0)
    if repeat and n > last:
        i = (n - last - 1) % len(repeat)
        return ("repeat", str(i)), repeat[i]
    return (("default",), default) if default is not None else None

