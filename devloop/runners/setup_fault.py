"""Failures of a python unit's own test set-up, which are the tester's to fix, never the coder's.

    fixture 'mocker' not found             a fixture no conftest and no installed plugin has
    ModuleNotFoundError from a tests/ frame the tests import a package the sandbox lacks
    a set-up or teardown error, no code/   a fixture raised by itself
    [XPASS(strict)]                        a strict xfail the code now passes

A fixture that calls into code/ and the code raises has a code/ frame: the coder's. Each
rule answers the hint the tester reads, or None. Also: where a SyntaxError really is (the
file and line Python names, not the line that imported it).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from devloop.project.resources import data_dir
from devloop.safe.safedir import Dir

REQUIREMENTS = data_dir("toolchains") / "python" / "requirements.txt"
_MISSING_FIXTURE = re.compile(r"fixture '(\w+)' not found")
_AVAILABLE = re.compile(r"available fixtures: (.+)")
_NO_MODULE = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([\w.]+)'")
# A frame of a pytest traceback: "tests/conftest.py:5: RuntimeError", "/usr/lib/...py:9: in f".
_ANY_FRAME = re.compile(r"^(\S+?\.py):(\d+):", re.M)
_DEF = re.compile(r"^\s*(?:async\s+)?def (\w+)\(", re.M)
# Python's own place of a SyntaxError, as pytest prints it under the importing frames.
_SYNTAX_AT = re.compile(
    r'^E\s+File "(?:[^"]*/)?((?:code|tests)/[^"]+\.py)", line (\d+)\n(?:E .*\n)*?'
    r"E\s+(SyntaxError|IndentationError|TabError)\b",
    re.M,
)
# Fixtures of plugins the sandbox's venv does not have, and the plugin that provides each.
PLUGIN_FIXTURES = {
    "mocker": "pytest-mock", "class_mocker": "pytest-mock", "module_mocker": "pytest-mock",
    "httpx_mock": "pytest-httpx", "requests_mock": "requests-mock", "benchmark":
    "pytest-benchmark", "freezer": "pytest-freezer", "event_loop": "pytest-asyncio",
    "snapshot": "syrupy", "faker": "Faker", "django_db_setup": "pytest-django",
}  # fmt: skip


@cache
def offered() -> str:
    """What the sandbox's python offers a unit's tests, from the toolchain's requirements."""
    pins = []
    try:
        lines = REQUIREMENTS.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        name, _, version = line.split("#", 1)[0].strip().partition("==")
        if name:
            pins.append(f"{name} {version}".strip())
    packages = ", ".join(pins) or "pytest"
    return (
        f"the standard library, {packages} (toolchains/python/requirements.txt), the "
        "unit's code/ as top-level modules and its dependencies' passed code as "
        "`units.<name>`"
    )


def unavailable(module: str) -> str:
    """Why an import of `module` failed in the sandbox, and what it offers instead."""
    top = module.split(".")[0]
    return (
        f"the sandbox has no package `{top}`: it offers {offered()}; nothing else can be "
        "installed, so test without it (unittest.mock, monkeypatch) or, if it is the unit's "
        "own module, the code must provide it under code/"
    )


def tests_fault(test: str, outcome: str, message: str, stack: str, unit_dir: Path) -> str | None:
    """The tester's hint when the failure is the tests' own set-up, else None (the code's)."""
    if message.startswith("[XPASS(strict)]"):
        return (
            f"`{test}` is marked xfail(strict=True) but passed: the code does what the test "
            "checks, so the marker is stale; drop it (or make the test check what is "
            "really still missing)."
        )
    if m := _MISSING_FIXTURE.search(stack):
        return _fixture_hint(test, m.group(1), stack)
    unit = [f for f in _frames(stack) if f[0].startswith(("code/", "tests/"))]
    innermost = unit[-1] if unit else None
    missing = _NO_MODULE.search(stack)
    if missing and innermost and innermost[0].startswith("tests/"):
        module = missing.group(1)
        if not _in_code(unit_dir, module):
            where = f"{innermost[0]}:{innermost[1]}"
            return f"`{test}` imports `{module}` at {where}, but {unavailable(module)}."
    if outcome == "error" and innermost and not any(f[0].startswith("code/") for f in unit):
        return _fixture_raised(test, stack, innermost)
    return None


def _frames(stack: str) -> list[tuple[str, int]]:
    """Every `path.py:N:` frame of a pytest traceback, outermost first."""
    return [(m.group(1), int(m.group(2))) for m in _ANY_FRAME.finditer(stack)]


def _in_code(unit_dir: Path, module: str) -> bool:
    """Whether the top package of `module` is under the unit's code/ (then its missing
    submodule is the code's)."""
    top = module.split(".")[0]
    try:
        with Dir.open(unit_dir) as unit:
            return unit.is_dir(f"code/{top}") or unit.is_file(f"code/{top}.py")
    except OSError:
        return False


def _fixture_hint(test: str, name: str, stack: str) -> str:
    """A fixture nothing defines: where it comes from, and what there is instead."""
    plugin = PLUGIN_FIXTURES.get(name)
    source = (
        f"it comes from the plugin {plugin}, which is not installed"
        if plugin
        else "no conftest.py and no installed plugin defines it"
    )
    shown = _AVAILABLE.search(stack)
    builtin = [f for f in (shown.group(1).split(", ") if shown else []) if not f.startswith("_")]
    choices = f" (fixtures there are: {', '.join(builtin[:12])})" if builtin else ""
    return (
        f"`{test}` asks for fixture `{name}`, but {source}: the sandbox offers "
        f"{offered()}{choices}. Define `{name}` in tests/conftest.py or use a fixture there is "
        "(unittest.mock and monkeypatch instead of mocker)."
    )


def _fixture_raised(test: str, stack: str, frame: tuple[str, int]) -> str:
    """A set-up or teardown that raised with no code/ on the way: the fixture's own error."""
    phase = "teardown" if "failed on teardown" in stack else "set-up"
    place = f"{frame[0]}:{frame[1]}"
    cut = stack.find(place)
    names = _DEF.findall(stack[: cut if cut >= 0 else len(stack)])
    fixture = f"fixture `{names[-1]}`" if names else "a fixture"
    error = next((ln[1:].strip() for ln in stack.splitlines() if ln.startswith("E ")), "")
    raised = f" raised `{error[:200]}`" if error else " raised"
    return (
        f"The {phase} of `{test}` failed before the code was involved: {fixture}{raised} at "
        f"{place}, and no code/ frame is on the way. It is the tests' own set-up: fix the "
        "fixture (the code cannot)."
    )


def syntax_frame(text: str) -> str | None:
    """`code/pkg/utils.py:63`: the file and line a SyntaxError is at, as Python named it."""
    m = _SYNTAX_AT.search(text)
    return f"{m.group(1)}:{m.group(2)}" if m else None


def at_syntax_error(text: str) -> str:
    """A traceback with the SyntaxError's own place appended as its innermost frame
    (`code/pkg/utils.py:63: SyntaxError`), so the culprit is that line, not the import."""
    m = _SYNTAX_AT.search(text)
    if m is None:
        return text
    return f"{text.rstrip()}\n\n{m.group(1)}:{m.group(2)}: {m.group(3)}"
