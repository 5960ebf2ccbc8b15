"""Everything an import puts in Redis, read from a project folder and checked first.

Reading and checking happen before any write, so a refused project (a unit past the
size cap) leaves Redis untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from devloop.core.artifacts import content_fault, name_refusal, refused_dir
from devloop.core.errors import FileTooLarge, Problem, ProjectInvalid
from devloop.core.sdd import section_document
from devloop.project.load import Project
from devloop.store.filesets import too_large
from devloop.store.keys import LEDGERS, Ledger
from devloop.store.ondisk import TEMP_NAME

CONVENTIONS = "conventions.md"
# The project hash's field that names its content: readers keep a parsed record per
# version and ask Redis for this field alone (store/project.py).
PROJECT_VERSION = "version"
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
    # Artifacts the folder's units hold, never imported: "units/u/code/.git/: why".
    dropped: list[str] = field(default_factory=list)


def record_version(fields: dict[str, bytes]) -> bytes:
    """The version of a project hash's content: a digest of its other fields, so it changes
    exactly when one of them does (a delete and a re-import of the same folder keep it)."""
    digest = hashlib.sha256()
    for name in sorted(k for k in fields if k != PROJECT_VERSION):
        digest.update(b"%d:%s=%d:" % (len(name), name.encode(), len(fields[name])))
        digest.update(fields[name])
    return digest.hexdigest()[:32].encode()


def spec_text(project: Project, unit: str) -> str:
    """spec.json as DevLoop writes it (used for specs derived from the SDD)."""
    return json.dumps(project.specs[unit].to_json_dict(), indent=2, ensure_ascii=False) + "\n"


def read_snapshot(project: Project, cap: int) -> Snapshot:
    """Read everything an import stores; FileTooLarge before reading a unit past the cap,
    ProjectInvalid when code/ or tests/ hold a file that is not source text.

    Artifacts (devloop/core/artifacts.py: a `.git`, a `__pycache__`, a `.so`) are left out and
    listed in `dropped`: they are never the project's source, and a unit never holds one.
    A file whose name says source but whose content is not text refuses the import: it
    is the user's to fix, and leaving it out would change the program unseen.
    """
    root = project.root
    unit_ids = [u.id for u in project.units.units]
    dropped: list[str] = []
    problems: list[Problem] = []
    unit_files = {uid: _read_unit(project, uid, cap, dropped, problems) for uid in unit_ids}
    if problems:
        raise ProjectInvalid(problems)
    conventions = root / CONVENTIONS
    info = {
        "units_json": project.units.model_dump_json(),
        "company_id": project.units.company_id,
        "stack": project.units.stack,
        "conventions": conventions.read_text("utf-8", errors="replace")
        if conventions.is_file()
        else "",
    }
    fields = {k: v.encode("utf-8") for k, v in info.items()}
    return Snapshot(
        pid=project.pid,
        project={**fields, PROJECT_VERSION: record_version(fields)},
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
        dropped=dropped,
    )


def source_problems(project: Project, cap: int) -> tuple[list[Problem], list[str]]:
    """What an import of the folder would refuse (files in code/ or tests/ that are not
    source text) and leave out (artifacts), without importing it."""
    dropped: list[str] = []
    problems: list[Problem] = []
    for unit in project.units.units:
        try:
            _read_unit(project, unit.id, cap, dropped, problems)
        except FileTooLarge:
            continue  # the import says so, naming the unit's largest files
    return problems, dropped


def _read_unit(
    project: Project, unit: str, cap: int, dropped: list[str], problems: list[Problem]
) -> dict[str, bytes]:
    """Every regular file under units/{unit} but artifacts (listed in dropped), plus
    spec.json when it was derived; a file that is not source text is a problem."""
    base = project.unit_dir(unit)
    left_out: list[tuple[str, str]] = []
    paths = walk_files(base, left_out)
    dropped += [f"units/{unit}/{rel}: {why}" for rel, why in left_out]
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
    for rel, data in files.items():
        if (fault := content_fault(rel, data)) is not None:
            problems.append(Problem(f"units/{unit}/{rel}", "content", *fault))
    if derived:
        files["spec.json"] = spec
    return files


def walk_files(base: Path, artifacts: list[tuple[str, str]] | None = None) -> dict[str, Path]:
    """Regular files under base by posix path relative to it; symlinks are not followed,
    and a killed writer's temporary files are not files of the project.

    Given `artifacts`, what devloop.core.artifacts refuses by name is left out and listed there
    as (path, why): a refused dir once (`code/.git/`), never entered.
    """
    found: dict[str, Path] = {}
    if not base.is_dir():
        return found
    for dirpath, dirnames, filenames in os.walk(base):
        here = Path(dirpath).relative_to(base)
        if artifacts is not None:
            for name in sorted(dirnames):
                rel = (here / name).as_posix()
                if refused_dir(rel):
                    artifacts.append((rel + "/", name_refusal(rel) or ""))
                    dirnames.remove(name)
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink() and not TEMP_NAME.fullmatch(name):
                rel = path.relative_to(base).as_posix()
                if artifacts is not None and (why := name_refusal(rel)) is not None:
                    artifacts.append((rel, why))
                    continue
                found[rel] = path
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
