"""errors.py draws the exception tree: every exception DevLoop defines is a DevLoopError, and
is drawn there at its parent, with its other bases, so the drawing cannot go stale."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import devloop
from devloop.core import errors
from devloop.core.errors import DevLoopError

DRAWN = re.compile(r"^(?P<rails>[ |]*)\+-- (?P<name>\w+)(?: \(also (?P<also>[\w, ]+)\))?")


def _defined_exceptions() -> dict[str, type[Exception]]:
    """Every Exception subclass a module of devloop defines, by name (each module imported)."""
    found: dict[str, type[Exception]] = {}
    for info in pkgutil.walk_packages(devloop.__path__, "devloop."):
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if (inspect.isclass(cls) and issubclass(cls, Exception)
                    and cls.__module__ == module.__name__):
                assert found.get(cls.__name__, cls) is cls, f"two exceptions named {cls.__name__}"
                found[cls.__name__] = cls
    return found


def _drawn_tree() -> dict[str, tuple[str, set[str]]]:
    """Each class the docstring draws -> (its parent in the drawing, its other bases)."""
    lines = (errors.__doc__ or "").splitlines()
    top = next(i for i, line in enumerate(lines) if line.strip().startswith("DevLoopError "))
    column = lines[top].index("DevLoopError")
    parents, drawn = ["DevLoopError"], {}
    for line in lines[top + 1:]:
        if not line.strip():
            break
        match = DRAWN.match(line[column:])
        assert match, f"not a line of the tree: {line!r}"
        depth = len(match["rails"]) // 4 + 1
        name = match["name"]
        assert name not in drawn, f"{name} is drawn twice"
        also = {b.strip() for b in (match["also"] or "").split(",") if b.strip()}
        drawn[name] = (parents[depth - 1], also)
        parents[depth:] = [name]
    return drawn


def test_every_exception_devloop_defines_is_a_devloop_error() -> None:
    found = _defined_exceptions()
    assert len(found) > 40  # the walk did reach every module
    assert [n for n, cls in found.items() if not issubclass(cls, DevLoopError)] == []


def test_the_tree_errors_py_draws_is_the_true_and_complete_one() -> None:
    found, drawn = _defined_exceptions(), _drawn_tree()
    assert sorted(set(found) - {"DevLoopError"} - set(drawn)) == [], "not drawn in errors.py"
    assert sorted(set(drawn) - set(found)) == [], "drawn in errors.py, defined nowhere"
    for name, (parent, also) in drawn.items():
        bases = [b.__name__ for b in found[name].__bases__]
        assert (bases[0], set(bases[1:])) == (parent, also), f"{name} is drawn wrong"
