"""Read a project spec YAML into a NewProject, or say what is wrong with it, line by line.

Every problem names `file:line`, the field and the fix, like the stub script's errors:
`spec.yaml:7: units[1].kind: "backend" is not one of be, fe, db, mw, lib; fix: ...`.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from devloop.core import dag
from devloop.core.errors import DevLoopError, Problem
from devloop.core.ids import is_valid_id, valid_form
from devloop.core.models import Stack, UnitKind
from devloop.core.suggest import closest, closest_id
from devloop.core.yamlindent import Misindent, described, misindented
from devloop.llm.stub.yamlmarks import ScriptInvalid, read_yaml
from devloop.scaffold.spec import FIXES, NewProject, NewUnit

Lines = Mapping[tuple[str, ...], int]
ALLOWED: dict[str, tuple[str, ...]] = {
    "kind": typing.get_args(UnitKind),
    "stack": typing.get_args(Stack),
}
# What usually causes PyYAML's messages, as a hint after the fix.
SYNTAX_HINTS = {
    "mapping values are not allowed": " (quote a value that holds `: `)",
    "expected <block end>": " (line the key up with the keys around it)",
    "found character '\\t'": " (indent with spaces, not tabs)",
    "but got ':'": " (close the bracket, or quote a value that holds `: `)",
}
SPEC_KEYS = frozenset(NewProject.model_fields) | frozenset(NewUnit.model_fields)
KIND_MEANINGS = "be: backend, fe: frontend, db: database, mw: middleware, lib: library"


class SpecInvalid(DevLoopError):
    """A project spec (or the folder it would go to) has problems; `problems` lists each."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def parse_spec(text: str, source: str) -> NewProject:
    """The spec in text, checked; SpecInvalid lists every problem with its line."""
    try:
        data, lines = read_yaml(text, source)
    except ScriptInvalid as exc:  # a syntax error (said here with its column), or a duplicate key
        syntax = _syntax_problem(text, source, fast=False)
        raise SpecInvalid([syntax] if syntax is not None else exc.problems) from None
    if data is None:
        raise SpecInvalid(
            [
                Problem(
                    source,
                    "(top level)",
                    "the file is empty",
                    "write company_id, project_id, stack and units",
                )
            ]
        )
    found: list[tuple[int, Problem]] = []
    spec: NewProject | None = None
    try:
        spec = NewProject.model_validate(data)
    except ValidationError as exc:
        errors = _misspellings(exc.errors(include_url=False))
        found += [_from_pydantic(err, source, lines) for err in errors]
    found += _graph_problems(data, source, lines)
    if found or spec is None:
        raise SpecInvalid([p for _, p in sorted(found, key=lambda pair: pair[0])])
    return spec


# libyaml's parser when PyYAML has it: 50 times faster than the pure-Python loader (a
# 10,000-unit spec is 2 MB). Its messages are worded differently, so an error is told by
# the pure-Python loader, as before.
FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _syntax_problem(text: str, source: str, fast: bool = True) -> Problem | None:
    """A YAML syntax error at `file:line:column`, or None when the text parses (`fast`:
    when libyaml's parser finds no error; what only loading finds, read_yaml does)."""
    if fast:
        try:
            for _event in yaml.parse(text, Loader=FAST_LOADER):
                pass
            return None
        except yaml.YAMLError:
            pass
    try:
        yaml.safe_load(text)  # PyYAML's own parser: its words are the ones SYNTAX_HINTS know
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if mark is None:
            return Problem(source, "(yaml)", str(exc), "fix the YAML syntax")
        misindent = misindented(text, mark.line + 1)
        if misindent is not None:
            return _indent_problem(misindent, source)
        problem = str(exc.problem or exc)
        where = f"line {mark.line + 1}, column {mark.column + 1}"
        hint = next((h for key, h in SYNTAX_HINTS.items() if key in problem), "")
        return Problem(f"{source}:{mark.line + 1}:{mark.column + 1}", "(yaml)", problem,
                       f"fix the YAML syntax at {where}{hint}")
    except yaml.YAMLError as exc:
        return Problem(source, "(yaml)", str(exc), "fix the YAML syntax")
    return None


def _indent_problem(found: Misindent, source: str) -> Problem:
    """`spec.yaml:11: units[1].depends_on: indented 6 spaces, deeper than `kind` on line 10
    (4 spaces); fix: indent `depends_on` 4 spaces, in line with `kind``."""
    try:
        _, lines = read_yaml(found.fixed, source)
        paths = [path for path, n in lines.items() if n == found.line and path
                 and path[-1] == found.key]
    except ScriptInvalid:
        paths = []
    field = _dotted(paths[0]) if paths else found.key
    message, fix = described(found, SPEC_KEYS)
    return Problem(f"{source}:{found.line}", field, message, fix)


def _misspellings(errors: list[ErrorDetails]) -> list[ErrorDetails]:
    """An unknown key near a missing one (`aceptance` for `acceptance`) is one mistake: keep
    the unknown key's error, marked with the name it meant, and drop the missing one."""
    missing = {tuple(e["loc"]) for e in errors if e["type"] == "missing"}
    meant: dict[tuple[Any, ...], str] = {}
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden" and loc:
            fields = [f for f in _model_fields(loc) if loc[:-1] + (f,) in missing]
            near = closest(str(loc[-1]), fields) or closest(str(loc[-1]), _model_fields(loc))
            if near is not None:
                meant[loc] = near
    dropped = {loc[:-1] + (name,) for loc, name in meant.items()}
    out: list[ErrorDetails] = []
    for err in errors:
        loc = tuple(err["loc"])
        if err["type"] == "missing" and loc in dropped:
            continue
        if loc in meant:
            err = {**err, "ctx": {**err.get("ctx", {}), "meant": meant[loc]}}
        out.append(err)
    return out


def _dotted(path: Sequence[Any]) -> str:
    """units[1].depends_on[0]"""
    out = ""
    for seg in path:
        if isinstance(seg, int) or str(seg).isdigit():
            out += f"[{seg}]"
        else:
            out += f".{seg}" if out else str(seg)
    return out or "(top level)"


def _line(path: Sequence[Any], lines: Lines) -> int:
    """The line of path in the YAML, or of its nearest parent that has one."""
    loc = tuple(str(s) for s in path)
    while loc and loc not in lines:
        loc = loc[:-1]
    return lines.get(loc, 1)


def _problem(
    source: str, lines: Lines, path: Sequence[Any], message: str, fix: str
) -> tuple[int, Problem]:
    line = _line(path, lines)
    return line, Problem(f"{source}:{line}", _dotted(path), message, fix)


def _shown(value: Any) -> str:
    """A value as the user wrote it, roughly: strings quoted, containers by kind."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return json.dumps(value, ensure_ascii=False, default=str)


def _model_fields(loc: tuple[Any, ...]) -> list[str]:
    """The fields allowed where an unknown one was found (the project's, or a unit's)."""
    model: type[BaseModel] = NewUnit if "units" in loc[:1] and len(loc) > 2 else NewProject
    return list(model.model_fields)


def _from_pydantic(err: ErrorDetails, source: str, lines: Lines) -> tuple[int, Problem]:
    """One pydantic error phrased for the person who wrote the YAML."""
    loc, kind, value = tuple(err["loc"]), err["type"], err.get("input")
    name = str(loc[-1]) if loc else ""
    if kind == "missing":
        message, fix = "missing", FIXES.get(name, f"add `{name}: ...`")
    elif kind == "extra_forbidden" and (meant := err.get("ctx", {}).get("meant")):
        message, fix = f'unknown field; did you mean "{meant}"?', f"rename `{name}` to `{meant}`"
    elif kind == "extra_forbidden":
        allowed = ", ".join(_model_fields(loc))
        message = "unknown field"
        fix = f"remove `{name}` or fix its spelling; allowed here: {allowed}"
    elif kind in ("literal_error", "enum") and name in ALLOWED:
        choices = ", ".join(ALLOWED[name])
        message = f"{_shown(value)} is not one of {choices}"
        fix = f"use one of {choices}" + (f" ({KIND_MEANINGS})" if name == "kind" else "")
    elif kind == "invalid_id":  # the id rule of devloop.core.ids, the same as units.json's
        message, fix = err["msg"], str(err.get("ctx", {}).get("fix"))
    elif kind == "too_short":
        message = "empty: at least one entry is needed"
        fix = FIXES.get(name, "add an entry")
    elif kind == "string_type":
        message = f"expected text, got {_shown(value)}"
        fix = "write text (quote it when YAML reads it as a number, a boolean or null)"
    elif kind == "list_type":
        message = f"expected a list, got {_shown(value)}"
        fix = "write a YAML list: `[a, b]` or one `- item` per line"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        message = f"expected a mapping, got {_shown(value)}"
        fix = "write `key: value` pairs"
    else:
        # Our own validators phrase their message as "what is wrong; fix: what to do".
        message, _, fix = err["msg"].removeprefix("Value error, ").partition("; fix: ")
        fix = fix or "correct the value"
    return _problem(source, lines, loc, message, fix)


def _graph_problems(data: Any, source: str, lines: Lines) -> list[tuple[int, Problem]]:
    """Duplicate ids, repeated or unknown dependencies, cycles and stray consumes."""
    units = data.get("units") if isinstance(data, dict) else None
    if not isinstance(units, list):
        return []
    found: list[tuple[int, Problem]] = []
    first: dict[str, int] = {}
    graph: dict[str, list[str]] = {}
    for i, unit in enumerate(units):
        uid = unit.get("id") if isinstance(unit, dict) else None
        if not isinstance(uid, str):
            continue
        if uid in first:
            other = first[uid]
            found.append(
                _problem(
                    source,
                    lines,
                    ("units", i, "id"),
                    f'duplicate unit id "{uid}" (also units[{other}], line '
                    f"{_line(('units', other, 'id'), lines)})",
                    "give every unit its own id",
                )
            )
            continue
        first[uid] = i
        deps = unit.get("depends_on", [])
        graph[uid] = [d for d in deps if isinstance(d, str)] if isinstance(deps, list) else []
        for j, dep in enumerate(graph[uid]):
            if dep in graph[uid][:j]:
                found.append(
                    _problem(
                        source,
                        lines,
                        ("units", i, "depends_on", j),
                        f'"{dep}" is listed twice',
                        "list each dependency once",
                    )
                )
    # `depends_on: [money-v2]` on a unit spelt `money.v2`: one mistake, told on the id, whose
    # fix names "money-v2".
    renamed = {valid_form(uid) for uid in graph if not is_valid_id(uid)}
    for issue in dag.check_graph(graph):
        if issue.kind == "unknown_dependency" and (
            not is_valid_id(issue.dependency) or issue.dependency in renamed
        ):
            continue  # already reported as an invalid id
        found.append(_issue_problem(issue, graph, first, source, lines))
    found += _consumes_problems(units, graph, first, source, lines)
    return found


def _issue_problem(
    issue: dag.GraphIssue,
    graph: dict[str, list[str]],
    first: dict[str, int],
    source: str,
    lines: Lines,
) -> tuple[int, Problem]:
    """A DAG issue placed on the depends_on entry that causes it."""
    dep = issue.dependency if issue.kind != "cycle" else issue.cycle[1 % len(issue.cycle)]
    path = ("units", first[issue.unit], "depends_on", graph[issue.unit].index(dep or ""))
    if issue.kind == "unknown_dependency":
        near = closest_id(dep or "", [u for u in graph if u != issue.unit])
        fix = f'add a unit with id "{dep}" or remove it from depends_on'
        if near is not None:
            fix = f'write "{near}" (or add a unit with id "{dep}")'
        meant = f'; did you mean "{near}"?' if near else ""
        return _problem(source, lines, path, f'unknown unit "{dep}"{meant}', fix)
    if issue.kind == "self_dependency":
        return _problem(
            source,
            lines,
            path,
            f'unit "{issue.unit}" depends on itself',
            f'remove "{issue.unit}" from its own depends_on',
        )
    return _problem(
        source,
        lines,
        path,
        f"dependency cycle {issue.cycle_text}",
        "remove one dependency of the cycle",
    )


def _consumes_problems(
    units: list[Any],
    graph: dict[str, list[str]],
    first: dict[str, int],
    source: str,
    lines: Lines,
) -> list[tuple[int, Problem]]:
    """A consumes entry naming a unit must name one the unit depends on."""
    found = []
    for uid, i in first.items():
        consumes = units[i].get("consumes", [])
        if not isinstance(consumes, list):
            continue
        # A misspelt dependency is reported once, on depends_on, not again on each use.
        meant = {closest_id(d, graph) for d in graph[uid] if d not in graph}
        for j, entry in enumerate(consumes):
            used = entry.get("unit") if isinstance(entry, dict) else None
            if isinstance(used, str) and used not in graph[uid] and used not in meant:
                near = closest_id(used, graph[uid]) if used not in graph else None
                message = f'"{used}" is not in depends_on'
                fix = f'add "{used}" to depends_on or remove this entry'
                if near is not None:
                    message, fix = f'{message}; did you mean "{near}"?', f'write "{near}"'
                found.append(_problem(source, lines, ("units", i, "consumes", j, "unit"),
                                      message, fix))
    return found
