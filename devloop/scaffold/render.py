"""A NewProject as the files of the seed layout: relative path -> text. Pure."""

from __future__ import annotations

import html
import json
from typing import Any

from devloop.core.contracts import hash_contract
from devloop.scaffold.spec import NewProject, NewUnit

SDD_DIR = "sdd/mvcp"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def units_json(spec: NewProject) -> dict[str, Any]:
    """units.json: every unit with the hash of its SDD contract."""
    entries = []
    for unit in spec.units:
        entry: dict[str, Any] = {
            "id": unit.id,
            "kind": unit.kind,
            "depends_on": list(unit.depends_on),
            "contract_hash": hash_contract(unit.contract),
        }
        if unit.stack:
            entry["stack"] = unit.stack
        if unit.review:
            entry["review"] = unit.review
        entries.append(entry)
    out: dict[str, Any] = {
        "company_id": spec.company_id,
        "project_id": spec.project_id,
        "stack": spec.stack,
    }
    if spec.review:
        out["review"] = spec.review
    return out | {"units": entries}


def spec_json(unit: NewUnit) -> dict[str, Any]:
    """units/{id}/spec.json."""
    data: dict[str, Any] = {
        "unit_id": unit.id,
        "kind": unit.kind,
        "depends_on": list(unit.depends_on),
        "acceptance_criteria": list(unit.acceptance),
    }
    if unit.stack:
        data["stack"] = unit.stack
    return data


def sdd_section(spec: NewProject, unit: NewUnit) -> str:
    """One `<section data-unit-id>`: heading, prose, contract JSON and acceptance list."""
    e = html.escape
    deps = ", ".join(unit.depends_on) or "none"
    lines = [
        f'  <section data-unit-id="{e(unit.id)}">',
        f"    <h2>{e(unit.id)}: {e(unit.title or unit.kind)}</h2>",
        f"    <p>Kind: {e(unit.kind)}. Stack: {e(spec.stack_of(unit))}. Depends on: {e(deps)}.</p>",
    ]
    if unit.description:
        lines.append(f"    <p>{e(unit.description.strip())}</p>")
    contract = json.dumps(unit.contract, indent=2, ensure_ascii=False)
    lines += [
        "    <h3>Contract</h3>",
        f"    <pre data-contract>{e(contract, quote=False)}</pre>",
        "    <h3>Acceptance</h3>",
        "    <ul data-acceptance>",
        *(f"      <li>{e(item, quote=False)}</li>" for item in unit.acceptance),
        "    </ul>",
        "  </section>",
    ]
    return "\n".join(lines)


def sdd_html(spec: NewProject) -> str:
    """The project's SDD file: one section per unit, in spec order."""
    title = html.escape(spec.project_id)
    sections = "\n\n".join(sdd_section(spec, unit) for unit in spec.units)
    return (
        '<!doctype html>\n<html lang="en">\n'
        f'<head><meta charset="utf-8"><title>{title}: SDD</title></head>\n'
        f"<body>\n  <h1>{title}</h1>\n\n{sections}\n\n</body>\n</html>\n"
    )


def render_project(spec: NewProject) -> dict[str, str]:
    """Every file of the scaffolded project, by path relative to its root."""
    files = {
        "units.json": _json(units_json(spec)),
        f"{SDD_DIR}/{spec.project_id}.html": sdd_html(spec),
    }
    for unit in spec.units:
        files[f"units/{unit.id}/spec.json"] = _json(spec_json(unit))
    if spec.conventions and spec.conventions.strip():
        files["conventions.md"] = spec.conventions.rstrip() + "\n"
    return files
