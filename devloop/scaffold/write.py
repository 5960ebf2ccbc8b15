"""Check everything, build the project in a scratch folder, validate it, then copy it over.

Every problem a user can cause is found before the destination is touched, so a refused
spec writes nothing.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from devloop.errors import Problem
from devloop.project import load_project
from devloop.scaffold.check import SpecInvalid, parse_spec
from devloop.scaffold.render import render_project
from devloop.scaffold.script import SCRIPT_FILE, dump_script, trivial_script
from devloop.scaffold.spec import NewProject


@dataclass
class ScaffoldReport:
    """What `scaffold` wrote."""

    root: Path
    project_id: str
    units: int
    files: list[str] = field(default_factory=list)
    script: Path | None = None


def load_spec(path: Path) -> NewProject:
    """Read and check a spec file; SpecInvalid names every problem with its line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecInvalid(
            [Problem(str(path), "file", "not found", "pass the path of the project spec YAML")]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecInvalid(
            [Problem(str(path), "file", f"cannot be read ({exc})", "pass a readable UTF-8 file")]
        ) from None
    return parse_spec(text, str(path))


def _check_dest(dest: Path, force: bool) -> None:
    """Refuse a file, or a non-empty folder unless force."""
    if dest.exists() and not dest.is_dir():
        raise SpecInvalid([Problem(str(dest), "DIR", "is a file", "name a new or empty folder")])
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise SpecInvalid(
            [
                Problem(
                    str(dest),
                    "DIR",
                    "is not empty",
                    "name a new or empty folder, or pass --force to write over it",
                )
            ]
        )


def scaffold(
    spec_path: Path,
    dest: Path,
    *,
    force: bool = False,
    script: bool = True,
    latency_ms: int = 0,
) -> ScaffoldReport:
    """Write the project spec_path describes into dest (and its trivial stub.yaml)."""
    spec = load_spec(spec_path)
    dest = Path(dest)
    _check_dest(dest, force)
    with tempfile.TemporaryDirectory(prefix="devloop-new-") as tmp:
        scratch = Path(tmp)
        files = render_project(spec)
        for rel, text in files.items():
            path = scratch / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        # Anything render_project gets wrong surfaces here, before dest is touched.
        load_project(scratch)
        if script:
            text = dump_script(trivial_script(scratch, latency_ms=latency_ms))
            (scratch / SCRIPT_FILE).write_text(text, encoding="utf-8")
            files[SCRIPT_FILE] = text
        dest.mkdir(parents=True, exist_ok=True)
        for rel in files:
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(scratch / rel, target)
    return ScaffoldReport(
        root=dest,
        project_id=spec.project_id,
        units=len(spec.units),
        files=sorted(files),
        script=dest / SCRIPT_FILE if script else None,
    )
