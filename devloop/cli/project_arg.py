"""A command's project argument: a folder that must be there, or a project id."""

from __future__ import annotations

from pathlib import Path

from devloop.cli.terminal import fail
from devloop.core.config import load_settings
from devloop.core.errors import Problem, ProjectInvalid
from devloop.core.ids import id_fault
from devloop.project.jsonfile import read_json
from devloop.project.load import Project, load_project


def missing_folder(project_dir: Path) -> Problem | None:
    """The problem of a project folder that is not there (None: it is a folder)."""
    if project_dir.is_dir():
        return None
    what = "is not a folder" if project_dir.exists() else "does not exist"
    return Problem(str(project_dir), "folder", what,
                   "pass the project folder (the one holding units.json), or make one with "
                   "`devloop new DIR --from spec.yaml`")


def load_folder(project_dir: Path) -> Project:
    """The project in a folder, or exit 2 with one line per problem."""
    if (missing := missing_folder(project_dir)) is not None:
        fail([missing])
    try:
        return load_project(project_dir)
    except ProjectInvalid as exc:
        fail(exc.problems)


def store_for(project: Path) -> tuple[str, Path | None]:
    """The project id of a folder (its units.json), or the argument itself as an id."""
    if (project / "units.json").is_file():
        data, problems = read_json(project / "units.json", "units.json")
        if problems or not isinstance(data, dict) or "project_id" not in data:
            fail(problems or [Problem("units.json", "project_id", "missing", "add it")])
        fault = id_fault(str(data["project_id"]), "project id")
        if fault is not None:
            fail([Problem("units.json", "project_id", *fault)])
        return str(data["project_id"]), project
    if not load_settings().redis_url:
        fail(
            [
                Problem(
                    str(project),
                    "PROJECT",
                    "not a project folder and DEVLOOP_REDIS_URL is unset",
                    "pass the project folder, or set DEVLOOP_REDIS_URL to use an id",
                )
            ]
        )
    fault = id_fault(str(project), "project id")
    if fault is not None:
        fail([Problem(str(project), "PROJECT", *fault)])
    return str(project), None
