"""Hollow builds: a scratch copy of a unit whose code/ keeps its names and does nothing.

    copy_unit(src, dest, unit)      the unit's files but runs/, read through no link
    hollow_python_code(view, unit)  code/**/*.py through hollow_py (host side: ast only)
    hollow_node_code(...)           code/** .js/.ts/.vue through hollow.cjs, in the sandbox

The tests then run against the copy as they ran against the real code: a test that
still passes cannot fail, whatever code/ does.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from devloop.runners.channel import HOLLOW_SCRIPT
from devloop.runners.hollow_py import HollowError, hollow_python
from devloop.safe.safedir import Dir
from devloop.safe.safetree import walk
from devloop.sandbox import Sandbox

NODE_SOURCES = (".js", ".cjs", ".mjs", ".ts", ".mts", ".cts", ".jsx", ".tsx", ".vue")
_SKIP = ("runs",)  # earlier runs' files are no input of a test run


def copy_unit(src: Path, dest: Path, unit_id: str) -> None:
    """Copy units/{unit} from one view into another, without runs/ and without links."""
    rel = f"units/{unit_id}"
    with Dir.open(src) as source, Dir.open(dest) as target:
        target.mkdirs(rel)
        for entry in walk(source, rel):
            if entry.problem is not None or entry.rel.split("/", 1)[0] in _SKIP:
                continue
            path = f"{rel}/{entry.rel}"
            if entry.kind == "dir":
                target.mkdirs(path)
            elif entry.kind == "file":
                target.write_atomic(path, source.read_bytes(path), 0o644)


def code_sources(view: Path, unit_id: str, suffixes: tuple[str, ...]) -> list[str]:
    """Unit-relative paths of code/ files with one of the suffixes, sorted."""
    rel = f"units/{unit_id}/code"
    with Dir.open(view) as root:
        if not root.is_dir(rel):
            return []
        return sorted(
            f"code/{e.rel}"
            for e in walk(root, rel)
            if e.kind == "file" and e.problem is None and e.rel.endswith(suffixes)
        )


def hollow_python_code(view: Path, unit_id: str) -> str | None:
    """Hollow every code/**/*.py in place; why it could not (None: done)."""
    unit = f"units/{unit_id}"
    with Dir.open(view) as root:
        for rel in code_sources(view, unit_id, (".py",)):
            try:
                text = hollow_python(root.read_text(f"{unit}/{rel}"), rel)
            except HollowError as exc:
                return str(exc)
            root.write_atomic(f"{unit}/{rel}", text, 0o644, replace=True)
    return None


def hollow_node_code(
    view: Path, unit_id: str, sandbox: Sandbox, node_modules: Path, plugins: Path
) -> str | None:
    """Hollow every code/ script and .vue file in place, in the sandbox; why it could not."""
    files = code_sources(view, unit_id, NODE_SOURCES)
    if not files:
        return None
    script = shlex.quote(str(plugins / HOLLOW_SCRIPT))
    obs = sandbox.run(
        f"node {script} " + " ".join(shlex.quote(f) for f in files),
        view=view,
        cwd=f"units/{unit_id}",
        writable=[f"units/{unit_id}/code"],
        timeout_s=60,
        ro_binds=[(node_modules, "node_modules"), (plugins, str(plugins))],
    )
    if obs.exit_code == 0 and not obs.timed_out:
        return None
    errors = [ln for ln in obs.stdout.splitlines() if ln.startswith("HOLLOW-ERROR ")]
    detail = "; ".join(e.removeprefix("HOLLOW-ERROR ") for e in errors[:3])
    return detail or (obs.stderr.strip()[-300:] or f"hollow.cjs exited {obs.exit_code}")
