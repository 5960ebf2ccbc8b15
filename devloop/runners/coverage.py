"""Line and branch coverage of a unit's code/ by its tests: command pieces and parsing.

The coverage run is the test run itself: pytest runs under `coverage run --branch` and
writes runs/{run}/coverage.json as it ends (the `coverage_json` plugin); vitest runs
with @vitest/coverage-v8 (AST-aware remapping, so branches count like istanbul's) writing
runs/{run}/coverage/coverage-summary.json and coverage-final.json.

Those files are written by the tests' own process, so they are detail the tests could
forge, never part of the verdict: they are read capped and without following links, and
anything missing or malformed makes the coverage absent (None), never the run red.

    CodeCoverage.lines / .branches     covered / total over code/ (None: nothing to count)
    CodeCoverage.files                 the same per file under code/
    CodeCoverage.unexecuted            "code/cart.py: total": exported functions no test ran
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Callable
from pathlib import PurePosixPath
from typing import Any

from devloop.core.models import CodeCoverage, FileCoverage
from devloop.runners.base import RunSpec
from devloop.runners.channel.coverage_json import OUT_ENV
from devloop.runners.excerpt import js_exports
from devloop.safe.safedir import Dir

PY_JSON = "coverage.json"
# The data file lives on the sandbox's private /tmp: only the json report is kept.
PY_DATA = "/tmp/devloop.coverage"
NODE_DIR = "coverage"
REPORT_CAP = 8 * 1024 * 1024
SOURCE_CAP = 512 * 1024
MAX_FILES = 200
MAX_UNEXECUTED = 50
_IDENT = re.compile(r"[A-Za-z_$][\w$]*")
_CLASS = re.compile(r"^(\s*)(?:export\s+(?:default\s+)?)?class\s+([A-Za-z_$][\w$]*)")
_METHOD_PREFIX = re.compile(r"\s*(?:(?:static|async|get|set)\s+)*\*?\s*")
_ASSIGNED = re.compile(r"([A-Za-z_$][\w$]*)\s*[:=]\s*(?:async\s*)?$")

Relative = Callable[[str], str]


# --- the commands -----------------------------------------------------------------------


def python_run(python: str, run_rel: str) -> str:
    """What replaces `python` before `-m pytest`: the same run, measured by coverage.py,
    its json report written at the run's end by the `coverage_json` plugin (which the
    pytest command loads: `-p coverage_json`), from the run's own process.

    No config file is read (--rcfile=/dev/null): the unit dir's files must not change
    what is measured."""
    out = shlex.quote(f"{run_rel}/{PY_JSON}")
    return (
        f"{OUT_ENV}={out} {python} -m coverage run "
        f"--rcfile=/dev/null --branch --source=code --data-file={PY_DATA}"
    )


def vitest_flags(run_rel: str) -> str:
    """vitest's coverage options: v8, code/ only, both json reports, also on red runs."""
    return (
        " --coverage.enabled --coverage.provider=v8 '--coverage.include=code/**'"
        " --coverage.experimentalAstAwareRemapping --coverage.reportOnFailure"
        " --coverage.reporter=json-summary --coverage.reporter=json"
        f" --coverage.reportsDirectory={shlex.quote(f'{run_rel}/{NODE_DIR}')}"
    )


# --- reading the reports ------------------------------------------------------------------


def read_json(unit: Dir, rel: str) -> Any:
    """A JSON report under the unit dir, or None (missing, a link, too big, not JSON)."""
    try:
        return json.loads(unit.read_text(rel, REPORT_CAP))
    except (OSError, ValueError):
        return None


def read_source(unit: Dir, rel: str) -> str | None:
    """A source file of code/ as text (the run cannot change code/), or None."""
    try:
        return unit.read_text(rel, SOURCE_CAP)
    except (OSError, ValueError):
        return None


def python_coverage(spec: RunSpec) -> CodeCoverage | None:
    """coverage.py's json report of the run, with the exported functions no test ran."""
    try:
        with Dir.open(spec.unit_dir) as unit:
            data = read_json(unit, f"{spec.run_rel}/{PY_JSON}")
            return parse_python(data, lambda rel: read_source(unit, rel))
    except OSError:
        return None


def node_coverage(spec: RunSpec) -> CodeCoverage | None:
    """coverage-v8's summary and final reports of the run, likewise."""
    base = f"{spec.run_rel}/{NODE_DIR}"
    try:
        with Dir.open(spec.unit_dir) as unit:
            return parse_node(
                read_json(unit, f"{base}/coverage-summary.json"),
                read_json(unit, f"{base}/coverage-final.json"),
                lambda rel: read_source(unit, rel),
                spec.relative,
            )
    except OSError:
        return None


# --- python -------------------------------------------------------------------------------


def parse_python(data: Any, source: Callable[[str], str | None]) -> CodeCoverage | None:
    """coverage.py json (format 3) -> CodeCoverage, None when it is not that."""
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        return None
    total = _py_counts(data.get("totals"))
    if total is None:
        return None
    files: dict[str, FileCoverage] = {}
    unexecuted: list[str] = []
    for rel, entry in sorted(data["files"].items())[:MAX_FILES]:
        counts = _py_counts(entry.get("summary") if isinstance(entry, dict) else None)
        if not _in_code(rel, ".py") or counts is None:
            continue
        files[rel] = FileCoverage(lines=counts[0], branches=counts[1])
        text = source(rel)
        if text is not None:
            ran = _py_functions_run(entry.get("functions"))
            unexecuted += [f"{rel}: {n}" for n, q in python_exports(text) if ran.get(q) is False]
    return CodeCoverage(
        lines=total[0], branches=total[1], files=files, unexecuted=unexecuted[:MAX_UNEXECUTED]
    )


def _py_counts(summary: Any) -> tuple[float | None, float | None] | None:
    """(lines, branches) ratios of a coverage.py summary, None when it is malformed."""
    if not isinstance(summary, dict):
        return None
    try:
        lines = ratio(summary.get("covered_lines"), summary.get("num_statements"))
        branches = ratio(summary.get("covered_branches"), summary.get("num_branches"))
    except ValueError:
        return None
    return lines, branches


def _py_functions_run(functions: Any) -> dict[str, bool]:
    """Qualified name -> whether any of its lines ran; functions without statements (a
    docstring only) are left out: nothing could show they ran."""
    out: dict[str, bool] = {}
    if not isinstance(functions, dict):
        return out
    for name, entry in functions.items():
        summary = entry.get("summary") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not isinstance(summary, dict):
            continue
        covered, statements = summary.get("covered_lines"), summary.get("num_statements")
        if _count(covered) is not None and _count(statements):
            out[name] = bool(covered)
    return out


def python_exports(text: str) -> list[tuple[str, str]]:
    """(shown name, coverage.py's qualified name) of a module's public top-level functions
    and the public methods of its public classes; `__init__` is shown as the class."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _public(node.name):
            out.append((node.name, node.name))
        elif isinstance(node, ast.ClassDef) and _public(node.name):
            for m in node.body:
                if not isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if m.name == "__init__":
                    out.append((node.name, f"{node.name}.__init__"))
                elif _public(m.name):
                    out.append((f"{node.name}.{m.name}", f"{node.name}.{m.name}"))
    return out


# --- node ---------------------------------------------------------------------------------


def parse_node(
    summary: Any, final: Any, source: Callable[[str], str | None], relative: Relative
) -> CodeCoverage | None:
    """coverage-v8's json-summary (the numbers) and json (functions) -> CodeCoverage."""
    if not isinstance(summary, dict):
        return None
    total = _node_counts(summary.get("total"))
    if total is None:
        return None
    files: dict[str, FileCoverage] = {}
    for path, entry in sorted(summary.items())[: MAX_FILES + 1]:
        rel = relative(str(path))
        counts = _node_counts(entry)
        if path != "total" and _in_code(rel) and counts is not None:
            files[rel] = FileCoverage(lines=counts[0], branches=counts[1])
    unexecuted: list[str] = []
    for path, entry in sorted(final.items())[:MAX_FILES] if isinstance(final, dict) else []:
        rel = relative(str(path))
        text = source(rel) if _in_code(rel) and not rel.endswith(".vue") else None
        if text is not None and isinstance(entry, dict):
            unexecuted += [f"{rel}: {name}" for name in node_unexecuted(entry, rel, text)]
    return CodeCoverage(
        lines=total[0], branches=total[1], files=files, unexecuted=unexecuted[:MAX_UNEXECUTED]
    )


def _node_counts(entry: Any) -> tuple[float | None, float | None] | None:
    """(lines, branches) ratios of an istanbul summary entry, None when it is malformed."""
    if not isinstance(entry, dict):
        return None
    lines, branches = entry.get("lines"), entry.get("branches")
    if not isinstance(lines, dict) or not isinstance(branches, dict):
        return None
    try:
        return (
            ratio(lines.get("covered"), lines.get("total")),
            ratio(branches.get("covered"), branches.get("total")),
        )
    except ValueError:
        return None


def node_unexecuted(entry: dict[str, Any], rel: str, text: str) -> list[str]:
    """The exported functions (and public methods and constructors of exported classes)
    of one file whose every V8 function range has a zero count."""
    fn_map, counts = entry.get("fnMap"), entry.get("f")
    if not isinstance(fn_map, dict) or not isinstance(counts, dict):
        return []
    exports = {m.group(0) for e in js_exports(rel, text) if (m := _IDENT.match(e))}
    lines = text.splitlines()
    ran: dict[str, bool] = {}
    for key, fn in fn_map.items():
        name = js_function_name(fn, lines) if isinstance(fn, dict) else None
        count = _count(counts.get(key))
        if name is None or count is None or name.split(".")[0] not in exports:
            continue
        ran[name] = ran.get(name, False) or count > 0
    return [name for name, did in ran.items() if not did]


def js_function_name(fn: dict[str, Any], lines: list[str]) -> str | None:
    """`total`, `Cart.add` or `Cart` (a constructor) for a function of an istanbul fnMap,
    named from the source at its declaration when the map calls it anonymous."""
    decl = fn.get("decl", {}).get("start", {}) if isinstance(fn.get("decl"), dict) else {}
    line, col = decl.get("line"), decl.get("column")
    if not isinstance(line, int) or not isinstance(col, int) or not 0 < line <= len(lines):
        return None
    text = lines[line - 1]
    before, ident = text[:col], _IDENT.match(text[col:])
    name = fn.get("name")
    if isinstance(name, str) and _IDENT.fullmatch(name):
        return name  # a named function declaration
    if ident and ident.group(0) not in ("function", "async") and _METHOD_PREFIX.fullmatch(before):
        owner = _enclosing_class(lines, line, len(before) - len(before.lstrip()))
        method = ident.group(0)
        if owner is None:
            return method  # an object literal's shorthand method
        if method == "constructor":
            return owner
        return None if method.startswith(("_", "#")) else f"{owner}.{method}"
    assigned = _ASSIGNED.search(before)
    return assigned.group(1) if assigned else None


def _enclosing_class(lines: list[str], line: int, indent: int) -> str | None:
    """The class a method at (line, indent) sits in: the nearest `class X` above, less
    indented (a heuristic over the text; no parse)."""
    for above in reversed(lines[: line - 1]):
        if (m := _CLASS.match(above)) and len(m.group(1)) < indent:
            return m.group(2)
        if above.strip() and len(above) - len(above.lstrip()) < indent and above[0] not in " \t}":
            return None  # a top-level statement that is not a class: not inside one
    return None


# --- shared -------------------------------------------------------------------------------


def ratio(covered: Any, total: Any) -> float | None:
    """covered / total rounded (None when total is 0); ValueError when they are not counts."""
    c, t = _count(covered), _count(total)
    if c is None or t is None or c > t:
        raise ValueError(f"not a coverage count: {covered!r} of {total!r}")
    return round(c / t, 4) if t else None


def _count(value: Any) -> int | None:
    """A non-negative int, else None (bools are not counts)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _in_code(rel: str, suffix: str | None = None) -> bool:
    """Whether a reported path is a file under code/ (relative, no `..`)."""
    parts = PurePosixPath(rel).parts
    return (
        len(parts) >= 2 and parts[0] == "code" and ".." not in parts
        and (suffix is None or rel.endswith(suffix))
    )


def _public(name: str) -> bool:
    return not name.startswith("_")


# --- the tester's self-check --------------------------------------------------------------


def unexecuted_problems(result: dict[str, Any] | None) -> list[str]:
    """The self-check's item for exported functions no test ran, from the runtime's own
    record of the last run (not the result.json the session can rewrite). Only a green run
    counts: in a red one a failed assertion may have stopped a test before its call."""
    if not (result or {}).get("ok"):
        return []
    cov = (result or {}).get("coverage")
    names = cov.get("unexecuted") if isinstance(cov, dict) else None
    if not isinstance(names, list) or not names:
        return []
    shown = ", ".join(f"{n}()" for n in names[:10] if isinstance(n, str))
    more = f" (and {len(names) - 10} more)" if len(names) > 10 else ""
    it = "it" if len(names) == 1 else "each"
    return [f"no test executes {shown}{more}; write a test that calls {it}"]


def describe(cov: CodeCoverage | dict[str, Any] | None) -> str:
    """`lines 93%, branches 80%; no test executes code/cart.py: total()` ("" when absent)."""
    if isinstance(cov, dict):
        try:
            cov = CodeCoverage.model_validate(cov)
        except ValueError:
            return ""
    if cov is None:
        return ""
    parts = [
        f"{label} {'-' if value is None else f'{value:.0%}'}"
        for label, value in (("lines", cov.lines), ("branches", cov.branches))
    ]
    text = ", ".join(parts)
    if cov.unexecuted:
        text += "; no test executes " + ", ".join(f"{n}()" for n in cov.unexecuted[:10])
    return text
