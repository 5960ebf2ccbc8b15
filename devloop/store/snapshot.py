"""Everything an import puts in Redis, read from a project folder and checked first.

Reading and checking happen before any write, so a refused project (a unit past the
size cap) leaves Redis untouched.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from devloop.project import Project
from devloop.sdd import section_document
from devloop.store.filesets import too_large
from devloop.store.keys import LEDGERS, Ledger
from devloop.store.ondisk import TEMP_NAME

CONVENTIONS = "conventions.md"
MEMORY_DIR = "memory/devloop"
AGENT_STATE_DIR = "agent-state"


@dataclass
class Snapshot:
    """A project's importable content; text fields are UTF-8 bytes, as Redis returns them."""

    pid: str
    project: dict[str, bytes]
    sdd: dict[str, bytes]
    contracts: dict[str, bytes]
    specs: dict[str, bytes]
    unit_files: dict[str, dict[str, bytes]]
    memory: dict[str, bytes] = field(default_factory=dict)
    agent_state: dict[str, bytes] = field(default_factory=dict)
    ledgers: dict[Ledger, list[str]] = field(default_factory=dict)


def spec_text(project: Project, unit: str) -> str:
    """spec.json as DevLoop writes it (used for specs derived from the SDD)."""
    return json.dumps(project.specs[unit].to_json_dict(), indent=2, ensure_ascii=False) + "\n"


def read_snapshot(project: Project, cap: int) -> Snapshot:
    """Read everything an import stores; FileTooLarge before reading a unit past the cap."""
    root = project.root
    unit_ids = [u.id for u in project.units.units]
    unit_files = {uid: _read_unit(project, uid, cap) for uid in unit_ids}
    conventions = root / CONVENTIONS
    info = {
        "units_json": project.units.model_dump_json(),
        "company_id": project.units.company_id,
        "stack": project.units.stack,
        "conventions": conventions.read_text("utf-8", errors="replace")
        if conventions.is_file()
        else "",
    }
    return Snapshot(
        pid=project.pid,
        project={k: v.encode("utf-8") for k, v in info.items()},
        sdd={
            u: section_document(s).encode("utf-8")
            for u, s in project.sections.items()
            if u in unit_files
        },
        contracts={
            u: json.dumps(c, sort_keys=True, ensure_ascii=False).encode("utf-8")
            for u, c in project.sdd_contracts.items()
        },
        specs={u: s.model_dump_json().encode("utf-8") for u, s in project.specs.items()},
        unit_files=unit_files,
        memory=read_tree(root / MEMORY_DIR),
        agent_state=read_tree(root / AGENT_STATE_DIR),
        ledgers={name: _read_lines(root / f"{name}.ndjson") for name in LEDGERS},
    )


def _read_unit(project: Project, unit: str, cap: int) -> dict[str, bytes]:
    """Every regular file under units/{unit}, plus spec.json when it was derived."""
    base = project.unit_dir(unit)
    paths = walk_files(base)
    sizes = {rel: path.stat().st_size for rel, path in paths.items()}
    derived = unit in project.derived_specs and "spec.json" not in sizes
    spec = spec_text(project, unit).encode("utf-8") if derived else b""
    if derived:
        # The session view needs units/{id}/spec.json; export then writes it to disk.
        sizes["spec.json"] = len(spec)
    total = sum(sizes.values())
    if total > cap:
        raise too_large(project.pid, unit, total, cap, sizes)
    files = {rel: path.read_bytes() for rel, path in paths.items()}
    if derived:
        files["spec.json"] = spec
    return files


def walk_files(base: Path) -> dict[str, Path]:
    """Regular files under base by posix path relative to it; symlinks are not followed,
    and a killed writer's temporary files are not files of the project."""
    found: dict[str, Path] = {}
    if not base.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink() and not TEMP_NAME.fullmatch(name):
                found[path.relative_to(base).as_posix()] = path
    return found


def read_tree(base: Path) -> dict[str, bytes]:
    """Contents of every regular file under base, keyed by relative posix path."""
    return {rel: path.read_bytes() for rel, path in walk_files(base).items()}


def _read_lines(path: Path) -> list[str]:
    """The complete, non-blank lines of an ndjson file (none when it is absent)."""
    try:
        data = path.read_text("utf-8")
    except FileNotFoundError:
        return []
    # split("\n"), not splitlines(): U+2028 is legal inside a JSON string.
    return [line for line in data.split("\n") if line.strip()]
