"""Pytest plugin: how the suite spreads over parallel workers (`pytest -n N`, as `make test`).

Tests that share a fixture wider than one test (a module's runner, the live console run, the
stub run the report tests read) are kept on one worker, so it is made once, as in a serial
run; every other test goes to whichever worker is free. On the workers, the tests that declare
a long timeout are handed out first: a fleet test started last keeps the whole run waiting.

A test marked `alone` (it makes the machine busy on purpose, needs it free, or tampers with
what every test's runs share, such as the verdict plugin's copy) runs while no other test
does: the workers share a readers-writer lock in the run's temp dir. The `alone` tests are
one group, handed out last: one worker runs them back to back, holding the lock from the
first to the last, once the other workers have run every test they were given.
"""

from __future__ import annotations

import fcntl
import inspect
import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Session fixtures each worker may make for itself: cheap, or private to the process (each
# worker's Redis is on a socket in its own temp dir; the toolchains install under a lock).
PER_WORKER = frozenset({"settings", "redis_server", "node_toolchain_dir", "python_toolchain_dir",
                        "fixtures", "sandbox", "playwright", "browser", "chromium"})
ALONE = "alone"


def _is_alone(item: pytest.Item | None) -> bool:
    """Whether a test is marked `alone` (None, no next test: not)."""
    return item is not None and item.get_closest_marker(ALONE) is not None


def _shared_keys(item: pytest.Item) -> list[str]:
    """What the item shares with other tests: its module, if it uses a module-wide fixture of
    ours, and each session fixture of ours it uses that a worker must not make again."""
    keys = [ALONE] if _is_alone(item) else []
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        defs = info.name2fixturedefs.get(name) if info else None
        if not defs or defs[-1].scope == "function" or not _ours(defs[-1].func):
            continue
        if defs[-1].scope in ("module", "class"):
            keys.append(item.nodeid.split("::")[0])
        elif name not in PER_WORKER:
            keys.append(f"{defs[-1].scope}-{name}")
    return keys


def _ours(func: object) -> bool:
    """Whether a fixture is defined under tests/ (pytest's own are per worker by design)."""
    try:
        return TESTS in Path(inspect.getfile(func)).resolve().parents  # type: ignore[arg-type]
    except TypeError:
        return False


def _groups(items: list[pytest.Item]) -> dict[str, str]:
    """Each item's group (by nodeid), tests linked through any shared key in one group."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    keys = {item.nodeid: _shared_keys(item) for item in items}
    for linked in keys.values():
        for key in linked[1:]:
            parent[root(key)] = root(linked[0])
    return {nodeid: root(linked[0]) for nodeid, linked in keys.items() if linked}


def declared_cost(item: pytest.Item) -> float:
    """A test's own timeout mark, in seconds: what its author expects it may take."""
    mark = item.get_closest_marker("timeout")
    if mark is None:
        return 0.0
    value = mark.args[0] if mark.args else mark.kwargs.get("timeout", 0)
    return float(value or 0)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = _groups(items)
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    if not hasattr(config, "workerinput"):
        return  # a serial run keeps the files' order
    unit_cost: dict[str, float] = {}
    for item in items:
        unit = groups.get(item.nodeid, item.nodeid)
        unit_cost[unit] = max(unit_cost.get(unit, 0.0), declared_cost(item))
    order = {item.nodeid: i for i, item in enumerate(items)}

    alone = next((groups[it.nodeid] for it in items if _is_alone(it)), None)

    def turn(it: pytest.Item) -> tuple[bool, float, int]:
        """Longest declared first, the alone group last, else the files' order."""
        unit = groups.get(it.nodeid, it.nodeid)
        return unit == alone, -unit_cost[unit], order[it.nodeid]

    items.sort(key=turn)


# The lock this worker holds across tests of one kind run back to back.
HELD = pytest.StashKey[ExitStack]()


def _take_turn(config: pytest.Config, alone: bool) -> ExitStack:
    """Take the run's lock shared (or, alone, exclusive); closing the stack releases it."""
    run_dir = config._tmp_path_factory.getbasetemp().parent  # type: ignore[attr-defined]
    held = ExitStack()
    room = os.open(run_dir / "alone.lock",
                   os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    held.callback(os.close, room)
    fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    return held


# tryfirst: outside pytest-timeout's wrapper, so the wait for a turn is not the test's time.
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not hasattr(item.config, "workerinput"):
        yield  # a serial run: every test is alone
        return
    alone = _is_alone(item)
    # A worker keeps its turn from test to test while the next is of the same kind (an
    # xdist worker knows its next test, or that there is none). So the alone group starts
    # once every other worker has run out of tests, and ends before any other starts: handed
    # back after each test, it let the workers start the tests they had waiting between
    # the alone ones, each of which then waited for them all again (in one run its 63 s of
    # tests spread over 89 s, the machine half idle while it drained).
    held = item.config.stash.get(HELD, None) or _take_turn(item.config, alone)
    try:
        yield
    finally:
        if nextitem is not None and _is_alone(nextitem) == alone:
            item.config.stash[HELD] = held
        else:
            if HELD in item.config.stash:
                del item.config.stash[HELD]
            held.close()
