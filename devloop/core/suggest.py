""""Did you mean ...?": the nearest known name to a misspelt one."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from devloop.core.errors import Problem
from devloop.core.ids import is_valid_id

CUTOFF = 0.6  # difflib's ratio; "carts" -> "cart" is 0.89, "mony" -> "money" 0.89
LISTED = 20  # known names a fix lists when none is near


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The known name nearest to word, or None when nothing is near enough."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def closest_id(word: str, choices: Iterable[str]) -> str | None:
    """The valid id nearest to word: an id that breaks the id rule is never suggested."""
    return closest(word, [c for c in choices if is_valid_id(c)])


def unknown(file: str, field: str, kind: str, word: str, choices: Iterable[str]) -> Problem:
    """`FILE: FIELD: no unit "mony"; did you mean "money"?`, or, when no name is near,
    `no unit "x"; fix: pick one of a, b` (choices are ids: only valid ones are named)."""
    known = [c for c in choices if is_valid_id(c)]
    near = closest_id(word, known)
    if near is not None:
        return Problem(file, field, f'no {kind} "{word}"; did you mean "{near}"?')
    listed = ", ".join(known[:LISTED]) + (", ..." if len(known) > LISTED else "")
    return Problem(file, field, f'no {kind} "{word}"', f"pick one of {listed}" if known else "")
