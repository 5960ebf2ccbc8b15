"""Check everything, build the project in a scratch folder, validate it, then copy it over.

Every problem a user can cause is found before the destination is touched, so a refused
spec writes nothing.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from devloop.core.errors import Problem
from devloop.project.load import load_project
from devloop.safe.safedir import Dir, Refused, describe
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


def _write(dest: Path, files: dict[str, str]) -> None:
    """Write files into dest (with --force, a folder someone else may have written) through
    O_EXCL temporaries renamed into place; a link or fifo in the way of any of them refuses
    the lot before anything is written (SpecInvalid)."""
    try:
        root = Dir.open(dest)
    except Refused as exc:
        raise SpecInvalid([Problem(str(dest), "DIR", exc.reason, "name a new or empty "
                                   "folder (DevLoop writes nothing through a link)")]) from None
    with root:
        problems = []
        for rel in files:
            try:
                st = root.lstat(rel)
            except Refused as exc:
                problems.append(Problem(str(dest / rel), "DIR", exc.reason, _UNSAFE))
                continue
            if st is not None and not stat.S_ISREG(st.st_mode):
                problems.append(Problem(str(dest / rel), "DIR", f"is {describe(st.st_mode)}",
                                        _UNSAFE))
        if problems:
            raise SpecInvalid(problems)
        for rel, text in files.items():
            root.write_atomic(rel, text, 0o644)


_UNSAFE = "remove it; DevLoop replaces only regular files and writes nothing through a link"


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
    files = render_project(spec)
    # A new folder is built beside its place and renamed into it: each file is written
    # once and nothing is left to delete (10,000 units are 10,000 folders). Into a folder
    # that exists, it is built in a temporary folder and copied over through a Dir.
    fresh = not dest.exists() and not dest.is_symlink()
    if fresh:
        dest.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{dest.name}.new-" if fresh else "devloop-new-",
                                    dir=dest.parent if fresh else None))
    try:
        _write_scratch(scratch, files)
        # Anything render_project gets wrong surfaces here, before dest is touched.
        project = load_project(scratch)
        if script:
            text = dump_script(trivial_script(project, latency_ms=latency_ms))
            _write_scratch(scratch, {SCRIPT_FILE: text})
            files[SCRIPT_FILE] = text
        if not (fresh and _renamed(scratch, dest)):
            dest.mkdir(parents=True, exist_ok=True)
            _write(dest, files)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
    return ScaffoldReport(
        root=dest,
        project_id=spec.project_id,
        units=len(spec.units),
        files=sorted(files),
        script=dest / SCRIPT_FILE if script else None,
    )


def _write_scratch(scratch: Path, files: dict[str, str]) -> None:
    """Write files under scratch, folders 0755 and files 0644 whatever the umask (as
    Dir.write_atomic writes them)."""
    made: set[Path] = {scratch}
    for rel, text in files.items():
        path = scratch / rel
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            for folder in path.relative_to(scratch).parents:
                if scratch / folder not in made:
                    made.add(scratch / folder)
                    (scratch / folder).chmod(0o755)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o644)


def _renamed(scratch: Path, dest: Path) -> bool:
    """Move the finished scratch folder to dest, which must still not exist (False: it
    appeared meanwhile, or the rename is not possible; the caller copies instead)."""
    umask = os.umask(0)
    os.umask(umask)
    scratch.chmod(0o777 & ~umask)  # as dest.mkdir() would have made it, not mkdtemp's 0700
    try:
        os.rename(scratch, dest)
    except OSError:
        return False
    return True
