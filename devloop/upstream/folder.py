"""Passed code as a project folder shows it (after `devloop run` or `devloop pull`), with
no Redis: what `devloop assemble` and `devloop mutants` build on.

A unit passed in the folder when its latest run's result.json is green and names the
code/ that is there now (its `code_digest`): code edited after the run has not passed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from devloop.core import dag
from devloop.core.config import Settings
from devloop.project.load import Project
from devloop.safe.safedir import Dir
from devloop.safe.safetree import Limits as WalkLimits
from devloop.safe.safetree import TooMany, walk
from devloop.store.filesets import code_digest
from devloop.upstream.mount import Upstream, lay_out, scope_for

_RUN = re.compile(r"run-(\d+)-(\d+)")
CAP = 2_000_000  # bytes of one file read


def latest_run(folder: Path, unit: str) -> dict[str, object] | None:
    """The result.json of the unit's latest tester run (run-{attempt}-{try}), or None."""
    runs = f"units/{unit}/runs"
    try:
        with Dir.open(folder) as root:
            # Read beneath the folder's handle: a run dir or result.json a session left as
            # a link or a fifo is refused, never followed.
            entries = walk(root, runs, WalkLimits(depth=1)) if root.is_dir(runs) else []
            names = [e.rel for e in entries
                     if e.kind == "dir" and e.problem is None and _RUN.fullmatch(e.rel)]
            for name in sorted(names, key=lambda n: tuple(map(int, _RUN.findall(n)[0])),
                               reverse=True):
                try:
                    data = json.loads(root.read_text(f"{runs}/{name}/result.json", CAP))
                except (OSError, ValueError):
                    continue
                return data if isinstance(data, dict) else None
    except (TooMany, OSError):
        pass
    return None


def folder_status(folder: Path, unit: str) -> str:
    """`passed`, or why the folder does not show the unit passed, in words."""
    result = latest_run(folder, unit)
    if result is None:
        return "it has no test run yet"
    if not result.get("ok"):
        return f"its latest run ({result.get('run_id', '?')}) is not green"
    if result.get("code_digest") != code_digest(folder, f"units/{unit}"):
        return "its code/ changed after its latest green run"
    return "passed"


def unit_files(folder: Path, unit: str) -> dict[str, bytes]:
    """The unit's code/** and contract.json in the folder (links and oddities left out)."""
    out: dict[str, bytes] = {}
    base = f"units/{unit}"
    try:
        with Dir.open(folder) as root:
            if root.is_dir(f"{base}/code"):
                for e in walk(root, f"{base}/code"):
                    if e.kind == "file" and e.problem is None:
                        out[f"code/{e.rel}"] = root.read_bytes(f"{base}/code/{e.rel}", CAP)
            if root.exists(f"{base}/contract.json"):
                out["contract.json"] = root.read_bytes(f"{base}/contract.json", CAP)
    except (TooMany, OSError):
        pass
    return out


def folder_upstream(project: Project, unit: str, settings: Settings) -> Upstream:
    """The upstream of `unit` from its project folder: the dependencies the folder shows
    passed, laid out as a session's runs import them."""
    deps = dag.upstream(project.graph(), unit)
    statuses = {d: folder_status(project.root, d) for d in deps}
    passed = {d: unit_files(project.root, d) for d, s in statuses.items() if s == "passed"}
    words = {d: f"the folder does not show it passed ({s})"
             for d, s in statuses.items() if s != "passed"}
    scope = scope_for(project.units, unit, project.stack_of(unit), passed, words,
                      project.sdd_contracts)
    return lay_out(settings, scope)
