"""A project folder in the seed layout: load it, check it, and say what is wrong."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devloop.core import dag
from devloop.core.contracts import hash_contract
from devloop.core.errors import Problem, ProjectInvalid
from devloop.core.ids import id_dir
from devloop.core.models import Stack, UnitsFile, UnitSpec
from devloop.core.sdd import SddSection, parse_sections
from devloop.project.jsonfile import parse_json, read_json, read_text, validate_model

SDD_DIR = "sdd/mvcp"


@dataclass
class Project:
    """A loaded, valid project: registry, SDD sections and specs, keyed by unit id."""

    root: Path
    units: UnitsFile
    sections: dict[str, SddSection]
    sdd_contracts: dict[str, dict[str, Any]]
    specs: dict[str, UnitSpec]
    derived_specs: set[str] = field(default_factory=set)

    @property
    def pid(self) -> str:
        """The project id from units.json."""
        return self.units.project_id

    def graph(self) -> dict[str, list[str]]:
        """Unit id -> ids it depends on."""
        return {u.id: list(u.depends_on) for u in self.units.units}

    def stack_of(self, unit_id: str) -> Stack:
        """The unit's stack: spec.json, then units.json's entry, then the project default."""
        spec = self.specs.get(unit_id)
        entry = self.units.unit(unit_id)
        return (spec and spec.stack) or (entry and entry.stack) or self.units.stack

    def unit_dir(self, unit_id: str) -> Path:
        """units/{id} under the project root (an id never climbs out of it)."""
        return id_dir(self.root / "units", unit_id)


def load_project(root: Path) -> Project:
    """Load and check a project folder; raise ProjectInvalid listing every problem."""
    root = Path(root)
    problems: list[Problem] = []
    units = _load_units(root, problems)
    if units is None:
        raise ProjectInvalid(problems)
    sections = _load_sections(root, problems)
    contracts: dict[str, dict[str, Any]] = {}
    specs: dict[str, UnitSpec] = {}
    derived: set[str] = set()
    for index, entry in enumerate(units.units):
        section = sections.get(entry.id)
        if section is None:
            if sections or not problems:
                problems.append(
                    Problem(
                        SDD_DIR,
                        f'section[data-unit-id="{entry.id}"]',
                        f'no section for unit "{entry.id}"',
                        f'add <section data-unit-id="{entry.id}"> to an SDD file',
                    )
                )
            continue
        contract = _section_contract(section, problems)
        if contract is None:
            continue
        contracts[entry.id] = contract
        declared = hash_contract(contract)
        if entry.contract_hash != declared:
            problems.append(
                Problem(
                    "units.json",
                    f"units[{index}].contract_hash",
                    f'"{entry.contract_hash}" does not match the SDD contract ({declared})',
                    f'set it to "{declared}" or correct the contract in {section.file}',
                )
            )
        spec = _load_spec(root, entry.id, problems)
        if spec is None and not (id_dir(root / "units", entry.id) / "spec.json").exists():
            spec = UnitSpec(
                unit_id=entry.id,
                kind=entry.kind,
                depends_on=list(entry.depends_on),
                acceptance_criteria=list(section.acceptance),
            )
            derived.add(entry.id)
        if spec is not None:
            specs[entry.id] = spec
    if problems:
        raise ProjectInvalid(problems)
    return Project(root, units, sections, contracts, specs, derived)


def _load_units(root: Path, problems: list[Problem]) -> UnitsFile | None:
    """units.json, with its ids and dependency graph checked."""
    data, found = read_json(root / "units.json", "units.json")
    problems += found
    if data is None:
        return None
    units, found = validate_model(UnitsFile, data, "units.json")
    problems += found
    if units is None:
        return None
    if not units.units:
        problems.append(
            Problem("units.json", "units", "no units declared", "add at least one unit")
        )
        return None
    first_index: dict[str, int] = {}
    for index, entry in enumerate(units.units):
        if entry.id in first_index:
            problems.append(
                Problem(
                    "units.json",
                    f"units[{index}].id",
                    f'duplicate unit id "{entry.id}" (also units[{first_index[entry.id]}])',
                    "give every unit its own id",
                )
            )
        first_index.setdefault(entry.id, index)
    graph = {u.id: list(u.depends_on) for u in units.units}
    for issue in dag.check_graph(graph):
        problems.append(_graph_problem(issue, first_index))
    return None if problems else units


def _graph_problem(issue: dag.GraphIssue, index: dict[str, int]) -> Problem:
    """A DAG issue phrased against units.json."""
    where = f"units[{index[issue.unit]}].depends_on"
    if issue.kind == "unknown_dependency":
        return Problem(
            "units.json",
            where,
            f'unknown unit "{issue.dependency}"',
            f'add "{issue.dependency}" to units or remove it from depends_on',
        )
    if issue.kind == "self_dependency":
        return Problem(
            "units.json",
            where,
            f'unit "{issue.unit}" depends on itself',
            f'remove "{issue.unit}" from its own depends_on',
        )
    return Problem(
        "units.json",
        where,
        f"dependency cycle {issue.cycle_text}",
        "remove one dependency of the cycle",
    )


def _load_sections(root: Path, problems: list[Problem]) -> dict[str, SddSection]:
    """Every unit section of sdd/**/*.html, keyed by unit id."""
    files = sorted((root / "sdd").rglob("*.html")) if (root / "sdd").is_dir() else []
    if not files:
        problems.append(
            Problem(SDD_DIR, "file", "no SDD HTML files found", f"add {SDD_DIR}/<name>.html")
        )
        return {}
    sections: dict[str, SddSection] = {}
    for path in files:
        rel = path.relative_to(root).as_posix()
        text, found = read_text(path, rel)
        problems += found
        for section in parse_sections(text or "", rel):
            if section.unit_id in sections:
                other = sections[section.unit_id]
                problems.append(
                    Problem(
                        rel,
                        f'section[data-unit-id="{section.unit_id}"]',
                        f"duplicate section (also {other.file} line {other.line})",
                        "keep one section per unit",
                    )
                )
                continue
            sections[section.unit_id] = section
    return sections


def _section_contract(section: SddSection, problems: list[Problem]) -> dict[str, Any] | None:
    """The parsed `<pre data-contract>` JSON of a section, with `exports` present."""
    where = f'section "{section.unit_id}" pre[data-contract]'
    if section.contract_text is None:
        problems.append(
            Problem(section.file, where, "missing", "add <pre data-contract>{...}</pre> to it")
        )
        return None
    data, found = parse_json(section.contract_text, section.file, where)
    problems += found
    if data is None:
        return None
    if not isinstance(data, dict):
        problems.append(Problem(section.file, where, "not a JSON object", 'write {"exports": ...}'))
        return None
    if "exports" not in data:
        problems.append(
            Problem(section.file, f"{where}.exports", "missing", 'add an "exports" object')
        )
        return None
    return data


def _load_spec(root: Path, unit_id: str, problems: list[Problem]) -> UnitSpec | None:
    """units/{id}/spec.json when present, checked against its unit id."""
    path = id_dir(root / "units", unit_id) / "spec.json"
    if not path.exists():
        return None
    rel = f"units/{unit_id}/spec.json"
    data, found = read_json(path, rel)
    problems += found
    if data is None:
        return None
    spec, found = validate_model(UnitSpec, data, rel)
    problems += found
    if spec is not None and spec.unit_id != unit_id:
        problems.append(
            Problem(rel, "unit_id", f'"{spec.unit_id}" is not this unit', f'set it to "{unit_id}"')
        )
        return None
    return spec


def summarize(project: Project) -> dict[str, Any]:
    """Counts for the one-screen summary of `devloop validate`."""
    graph = project.graph()
    depth = dag.levels(graph)
    length, path = dag.critical_path(graph, dict.fromkeys(graph, 1.0))
    return {
        "project": f"{project.units.company_id}/{project.pid}",
        "units": len(graph),
        "kinds": dict(Counter(u.kind for u in project.units.units)),
        "stacks": dict(Counter(project.stack_of(u) for u in graph)),
        "depth": max(depth.values(), default=0),
        "critical_path": path,
        "roots": [u for u, deps in graph.items() if not deps],
        "acceptance": sum(len(s.acceptance_criteria) for s in project.specs.values()),
        "derived_specs": sorted(project.derived_specs),
        "length": length,
    }
