"""One rule for every id (company, project, unit): a name, never a path.

Ids become directory names (views, project folders, exports, the report) and parts of
Redis keys, so they are letters, digits, `-` and `_`, start with a letter or a digit,
and are at most 64 characters long. The models enforce the rule on input; `id_dir`
checks it again wherever an id is joined to a path.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from devloop.core.errors import DevLoopError

MAX_ID = 64
_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_ID - 1}}}")
_CHARS = re.compile(r"[A-Za-z0-9_-]*")
_OTHERS = re.compile(r"[^A-Za-z0-9_-]+")
FIX_CHARS = "letters, digits, - and _ only"
FIX_START = "start it with a letter or a digit"
FIX_LENGTH = f"at most {MAX_ID} characters of letters, digits, - and _"
SHOWN_CHARS = 40


class InvalidId(DevLoopError, ValueError):
    """A value used as an id (or joined to a path as one) breaks the id rule."""


def is_valid_id(value: object) -> bool:
    """Whether value is a str that follows the id rule."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def valid_form(value: str) -> str | None:
    """The id a person most likely meant by value (`money.v2` -> `money-v2`): every run of
    other characters one `-`, dropped at either end; None when nothing is left."""
    form = _OTHERS.sub("-", value).lstrip("-_")[:MAX_ID].rstrip("-")
    return form if is_valid_id(form) else None


def id_fault(value: str, what: str = "id") -> tuple[str, str] | None:
    """(what is wrong, the fix) for a value that is not a valid id, or None. The fix names
    a valid id to write where one is near (never an invalid one)."""
    if is_valid_id(value):
        return None
    if len(value) > MAX_ID:
        shown = json.dumps(value[:SHOWN_CHARS]) + "..."
        return f"{shown} is not a valid {what} ({len(value)} characters)", FIX_LENGTH
    shown = json.dumps(value)  # ASCII escapes: a newline or a control character shows as such
    form = valid_form(value)
    example = f", e.g. {json.dumps(form)}" if form else ""
    if value and _CHARS.fullmatch(value):
        return f"{shown} is not a valid {what}", FIX_START + example
    return f"{shown} is not a valid {what}", FIX_CHARS + example


def check_id(value: str, what: str = "id") -> str:
    """value when it is a valid id; InvalidId saying why otherwise."""
    fault = id_fault(value, what)
    if fault is not None:
        raise InvalidId(f"{fault[0]}; fix: {fault[1]}")
    return value


def id_dir(root: Path, *ids: str) -> Path:
    """root/id/id...: each part a valid id, and the result asserted to stay inside root."""
    path = Path(root)
    for value in ids:
        path = path / check_id(value)
    base = os.path.normpath(root)
    if ids and not os.path.normpath(path).startswith(base.rstrip(os.sep) + os.sep):
        raise InvalidId(f"{path} is outside {base}")
    return path


def _validator(what: str) -> AfterValidator:
    def validate(value: str) -> str:
        fault = id_fault(value, what)
        if fault is not None:
            # `fix` travels in the error's context: jsonfile and the scaffold print it.
            # The message goes in as a value: braces in it are text, never placeholders.
            raise PydanticCustomError(
                "invalid_id", "{message}", {"message": fault[0], "fix": fault[1]}
            )
        return value

    return AfterValidator(validate)


UnitId = Annotated[str, _validator("unit id")]
ProjectId = Annotated[str, _validator("project id")]
CompanyId = Annotated[str, _validator("company id")]
