"""Read JSON files written by people and other tools, turning every mistake into a Problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from devloop.core.errors import Problem

M = TypeVar("M", bound=BaseModel)


def read_text(path: Path, rel: str) -> tuple[str | None, list[Problem]]:
    """A file's UTF-8 text, or the problem that stops it being read."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, [Problem(rel, "file", "not found", f"create {rel}")]
    except OSError as exc:
        return None, [Problem(rel, "file", f"cannot be read ({exc.strerror})", "check permissions")]
    try:
        return data.decode("utf-8"), []
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        return None, [
            Problem(
                rel,
                "file",
                f"not valid UTF-8 (byte 0x{bad} at offset {exc.start})",
                "save the file as UTF-8",
            )
        ]


def parse_json(text: str, rel: str, field: str = "file") -> tuple[Any, list[Problem]]:
    """Parsed JSON, or a problem naming the line and column of the syntax error."""
    try:
        return json.loads(text), []
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        return None, [
            Problem(rel, field, f"invalid JSON at {where} ({exc.msg})", "correct the JSON syntax")
        ]


def read_json(path: Path, rel: str) -> tuple[Any, list[Problem]]:
    """A JSON file's value, or the problems met reading it."""
    text, problems = read_text(path, rel)
    if text is None:
        return None, problems
    return parse_json(text, rel)


def field_path(loc: tuple[int | str, ...], prefix: str = "") -> str:
    """`("units", 2, "kind")` -> `units[2].kind`."""
    out = prefix
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _fix_for(error: ErrorDetails) -> str:
    """What to do about one pydantic error, in words."""
    kind = error["type"]
    name = error["loc"][-1] if error["loc"] else "value"
    fix = error.get("ctx", {}).get("fix")
    if isinstance(fix, str):
        return fix  # our own validators (the id rule) say what to do
    if kind == "missing":
        return f'add "{name}"'
    if kind == "literal_error":
        return f"use one of {error['ctx']['expected']}"
    if kind == "extra_forbidden":
        return f'remove "{name}"'
    if kind.endswith("_type") or kind.endswith("_parsing"):
        return f"make it {kind.removesuffix('_type').removesuffix('_parsing')}"
    return "correct the value"


def validate_model(
    model: type[M], data: Any, rel: str, prefix: str = ""
) -> tuple[M | None, list[Problem]]:
    """The model built from data, or one Problem per field error."""
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        problems = [
            Problem(
                rel, field_path(e["loc"], prefix), e["msg"][0].lower() + e["msg"][1:], _fix_for(e)
            )
            for e in exc.errors(include_url=False)
        ]
        return None, problems
