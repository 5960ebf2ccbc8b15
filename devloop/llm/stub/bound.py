"""Templates as a script holds them: compiled, checked at load, filled in per request.

template.py does the filling; here a template is matched to a session key, its names are
checked against every unit's row, and a turn that does not come out valid is reported at
the template's own line and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from re import Pattern
from typing import Any

from pydantic import Field, ValidationError

from devloop.core.errors import Problem
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
from devloop.llm.stub.turn import Strict, Turn, TurnNumber
from devloop.llm.stub.yamlmarks import (
    ScriptInvalid,
    dotted,
    line_of,
    problems_from_validation,
    where,
)


class Template(Strict):
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
class Bound:
    """A template ready to match: its pattern compiled, the row names it needs."""

    pattern: str
    regex: Pattern[str]
    template: Template
    row_names: frozenset[str]  # values it takes from the unit's row of `units:`


def bind(pattern: str, template: Template) -> Bound:
    """The template with its pattern compiled (ValueError for one that cannot be)."""
    regex = key_regex(pattern)
    captured = set(regex.groupindex)
    names = {use.name for _, turn in template.entries() for use in uses(turn)}
    return Bound(pattern, regex, template, frozenset(names - captured))


def filled(bound: Bound, values: dict[str, Any], n: int, session_key: str) -> Turn | None:
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


def template_problems(
    templates: Mapping[str, Template], units: Mapping[str, Mapping[str, Any]], source: str,
    lines: Mapping[Loc, int],
) -> list[Problem]:
    """Templates checked at load: patterns, names with a value for every unit, and each turn
    filled in for the first unit of the table (the rest are filled as requests come)."""
    found: list[Problem] = []

    def problem(path: Loc, message: str, fix: str) -> None:
        found.append(Problem(where(source, line_of(path, lines)), dotted(path), message, fix))

    for pattern, template in templates.items():
        here = ("templates", pattern)
        try:
            bound = bind(pattern, template)
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
        for unit, row in units.items() if bound.row_names else ():
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
        sample = next(iter(units.items()), None) if bound.row_names else None
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
