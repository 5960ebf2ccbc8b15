"""`devloop new`: scaffold a project in the seed layout from a compact YAML spec.

load_spec(path)                     -> NewProject, or SpecInvalid (each problem with its line)
render_project(spec)                -> {relative path: text} of the seed layout (pure)
trivial_script(project_dir)         -> a stub script under which every unit passes first time
scaffold(spec_path, dest, ...)      -> all of the above, checked, then written (or nothing)
"""

from devloop.scaffold.check import SpecInvalid, parse_spec
from devloop.scaffold.render import render_project
from devloop.scaffold.script import dump_script, trivial_script
from devloop.scaffold.spec import NewProject, NewUnit
from devloop.scaffold.write import ScaffoldReport, load_spec, scaffold

__all__ = [
    "NewProject",
    "NewUnit",
    "ScaffoldReport",
    "SpecInvalid",
    "dump_script",
    "load_spec",
    "parse_spec",
    "render_project",
    "scaffold",
    "trivial_script",
]
