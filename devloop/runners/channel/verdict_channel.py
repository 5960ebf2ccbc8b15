"""DevLoop's verdict channel for pytest: one JSON line per event to the fd in VERDICT_FD.

Loaded with `-p verdict_channel` from a read-only directory; it writes as each test phase
finishes, so nothing the tests do afterwards can change what was already sent.

It also guards pytest's reporting path. At import (before any conftest or test module,
so before the code under test) it snapshots the report classes, the runner's and the
session's functions, pluggy's call path, builtins, the trace hooks, import hooks and
its own functions; at the start of the session, the hook implementations registered.
Before every record it sends and at the end it compares: on any change it sends one
`tamper` record naming it, which makes the run `crashed` ("the code under test changed
the test framework") for the coder to fix.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import sys
import threading
from typing import Any

import _pytest.assertion.rewrite
import _pytest.main
import _pytest.outcomes
import _pytest.python
import _pytest.reports
import _pytest.runner
import pluggy._callers
import pluggy._hooks
import pluggy._manager

_FD = int(os.environ.get("VERDICT_FD", "-1") or -1)
if _FD >= 3:
    with contextlib.suppress(OSError):  # processes the tests start do not inherit it
        os.set_inheritable(_FD, False)
# Bound now: the code under test may replace os.write or json.dumps later.
_write, _dumps = os.write, json.dumps
_GUARDED = (
    _pytest.reports, _pytest.runner, _pytest.main, _pytest.python, _pytest.outcomes,
    _pytest.assertion.rewrite, pluggy._callers, pluggy._hooks, pluggy._manager,
)
# Hooks on the way from a test to its report, and from reports to the exit status.
_HOOKS = (
    "pytest_runtest_protocol", "pytest_runtest_setup", "pytest_runtest_call",
    "pytest_runtest_teardown", "pytest_runtest_makereport", "pytest_runtest_logreport",
    "pytest_pyfunc_call", "pytest_report_teststatus", "pytest_collectreport",
    "pytest_make_collect_report", "pytest_collection_finish", "pytest_runtestloop",
    "pytest_sessionfinish",
)
_seen: set[str] = set()


def _send(record: dict[str, Any]) -> None:
    if _FD < 3:
        return
    data = (_dumps(record, ensure_ascii=False) + "\n").encode()
    while data:
        data = data[_write(_FD, data) :]


def _members(owner: object) -> dict[str, int]:
    """The identity of every value an object (a module or a class) holds by name."""
    try:
        items = list(vars(owner).items())
    except TypeError:
        return {}
    return {name: id(value) for name, value in items}


def _bindings() -> list[tuple[str, Any, str, bool]]:
    """Every name on the reporting path, as (label, the live namespace it is looked up in,
    name, late): a module's dict, a class's mappingproxy (a live view), sys.modules,
    builtins, these globals. Late ones count only once a test's fixtures are torn down."""
    out: list[tuple[str, Any, str, bool]] = []
    names = {module.__name__ for module in _GUARDED}
    for module in _GUARDED:
        out.append((f"sys.modules[{module.__name__!r}]", sys.modules, module.__name__, False))
        # Imported names too: `_pytest.runner.TestReport` is how the runner makes reports.
        for name, value in vars(module).items():
            if callable(value):
                out.append((f"{module.__name__}.{name}", vars(module), name, False))
                if isinstance(value, type) and value.__module__ in names:
                    for attr in _members(value):
                        out.append((f"{value.__module__}.{value.__qualname__}.{attr}",
                                    vars(value), attr, False))
    out.append((f"sys.modules[{__name__!r}]", sys.modules, __name__, False))
    for name in ("_send", "_drift", "_guard", *_OWN_HOOKS):
        out.append((f"{__name__}.{name}", globals(), name, False))
    for name in _members(builtins):
        out.append((f"builtins.{name}", vars(builtins), name, True))
    return out


def _traces() -> list[tuple[str, int]]:
    """The trace and profile hooks now (0 for coverage.py's tracer, which comes late)."""
    out = []
    for name in ("gettrace", "getprofile"):
        for owner in (sys, threading):
            hook = getattr(owner, name)()
            out.append((f"{owner.__name__}.{name}()", 0 if _coverage(hook) else id(hook)))
    return out


def _coverage(hook: object) -> bool:
    """Whether a trace function is coverage.py's (or nothing at all)."""
    owner = getattr(hook, "__self__", hook)
    return hook is None or type(owner).__module__.startswith("coverage")


def _drift(fixtures_done: bool) -> list[str]:
    """What differs from the snapshot; names new since it do not count (builtins grow).
    Builtins and trace hooks count only once a test's fixtures are torn down: a test may
    monkeypatch `builtins.input` while it runs. One identity check per binding, labels
    only for what changed: it runs before every record."""
    out = [label for label, where, name, ident in _EARLY if id(where.get(name)) != ident]
    if fixtures_done:
        out += [label for label, where, name, ident in _LATE if id(where.get(name)) != ident]
        out += [label for (label, ident), (_, now) in zip(_TRACES, _traces(), strict=True)
                if now != ident]
    return out


def _hookimpls(config: Any) -> dict[str, list[tuple[str, int]]]:
    """The registered implementations of the reporting hooks: (plugin, function) each."""
    out: dict[str, list[tuple[str, int]]] = {}
    manager = config.pluginmanager
    for name in _HOOKS:
        caller = getattr(manager.hook, name, None)
        impls = caller.get_hookimpls() if caller is not None else []
        out[name] = [(impl.plugin_name, id(impl.function)) for impl in impls]
    return out


def _conftest(config: Any, plugin_name: str) -> bool:
    """Whether a plugin is a conftest under tests/ (those register as collection goes)."""
    plugin = config.pluginmanager.get_plugin(plugin_name)
    path = str(getattr(plugin, "__file__", "") or "")
    return os.path.basename(path) == "conftest.py" and "/code/" not in path


# (label, namespace, name, identity) as the plugin was imported; and the trace hooks.
_EARLY: list[tuple[str, Any, str, int]] = []
_LATE: list[tuple[str, Any, str, int]] = []
_TRACES: list[tuple[str, int]] = []
_IMPLS: dict[str, list[tuple[str, int]]] = {}
_CONFIG: list[Any] = []


def _guard(fixtures_done: bool = True) -> None:
    """Compare the reporting path with the snapshots; send a tamper record on a change."""
    what = _drift(fixtures_done)
    if _CONFIG:
        config = _CONFIG[0]
        for hook, impls in _hookimpls(config).items():
            before = _IMPLS.get(hook, [])
            extra = [i for i in impls if i not in before and not _conftest(config, i[0])]
            missing = [i for i in before if i not in impls]
            what += [f"{hook} implementation {name}" for name, _ in extra + missing]
    fresh = [w for w in what if w not in _seen]
    if fresh:
        _seen.update(fresh)
        _send({"e": "tamper", "what": ", ".join(fresh[:5])})


def pytest_sessionstart(session: Any) -> None:
    _CONFIG.append(session.config)
    _IMPLS.update(_hookimpls(session.config))
    _guard()


def pytest_collectreport(report: Any) -> None:
    _guard()
    if report.failed:
        _send({"e": "collect_error", "id": report.nodeid})
    elif report.skipped:
        _send({"e": "collect_skipped", "id": report.nodeid})


def pytest_collection_finish(session: Any) -> None:
    _guard()
    _send({"e": "collected", "n": len(session.items)})


def pytest_runtest_logstart(nodeid: str, location: Any) -> None:
    # Sent before the test's set-up: a run killed later names the test it was in.
    _send({"e": "start", "id": nodeid})


def pytest_runtest_logreport(report: Any) -> None:
    _guard(fixtures_done=report.when == "teardown")
    record = {"e": "phase", "id": report.nodeid, "when": report.when, "outcome": report.outcome}
    if hasattr(report, "wasxfail"):  # marked xfail: a skip is an xfail, a pass an xpass
        record["xfail"] = True
    _send(record)


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    _guard()
    _send({"e": "end", "status": int(exitstatus)})


_OWN_HOOKS = (
    "pytest_sessionstart", "pytest_collectreport", "pytest_collection_finish",
    "pytest_runtest_logstart", "pytest_runtest_logreport", "pytest_sessionfinish",
)
# A class imported into several guarded modules is listed under each: once is enough.
for _label, _where, _name, _late in {b[0]: b for b in _bindings()}.values():
    (_LATE if _late else _EARLY).append((_label, _where, _name, id(_where.get(_name))))
_TRACES.extend(_traces())
