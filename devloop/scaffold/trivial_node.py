"""Trivial node code and vitest tests: an express app (be), a Vue SFC (fe), a module (rest).

Each passes the coder's syntax check (`node --check`, or a vite dry-run build for fe) and
is exercised for real by its tests: supertest against the app, @vue/test-utils mounting
the component, a plain call of the module.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from devloop.scaffold.trivial_common import TrivialUnit, declared_statuses

METHODS = ("get", "post", "put", "patch", "delete")


@dataclass(frozen=True)
class Route:
    """One route of the contract's `http` exports and the statuses it declares."""

    method: str
    path: str
    statuses: tuple[int, ...]

    @property
    def sample(self) -> str:
        """A concrete path to request (`:id` -> `1`)."""
        return re.sub(r":\w+", "1", self.path)

    @property
    def label(self) -> str:
        return f"{self.method.upper()} {self.path}"


def _js(value: Any) -> str:
    """A JS literal (JSON is one) for a string or number."""
    return json.dumps(value, ensure_ascii=False)


def _declared_file(contract: dict[str, Any], suffix: str, default: str) -> str:
    """The first code/ file with suffix the contract names, else default."""
    exports = contract.get("exports") or {}
    named = [str(k) for k in (exports.get("module") or {}) if isinstance(k, str)]
    for comp in exports.get("components") or []:
        if isinstance(comp, dict) and isinstance(comp.get("file"), str):
            named.append(comp["file"])
    ok = [p for p in named if p.startswith("code/") and p.endswith(suffix) and ".." not in p]
    return ok[0] if ok else default


def routes(contract: dict[str, Any]) -> list[Route]:
    """The contract's http routes (GET /health answering 200 when it declares none)."""
    found = []
    for entry in (contract.get("exports") or {}).get("http") or []:
        if not isinstance(entry, dict):
            continue
        method, path = str(entry.get("method", "")).lower(), str(entry.get("path", ""))
        if method not in METHODS or not path.startswith("/"):
            continue
        codes = sorted(int(c) for c in (entry.get("responses") or {}) if str(c).isdigit())
        found.append(Route(method, express_path(path), tuple(codes) or (200,)))
    return found or [Route("get", "/health", (200,))]


def express_path(path: str) -> str:
    """An OpenAPI-style path as Express routes it: `/notes/{id}` -> `/notes/:id`."""
    return re.sub(r"\{(\w+)\}", r":\1", path)


def _depth(rel: str) -> str:
    """The tests/ -> code file import path."""
    return "../" + rel


def be_unit(unit_id: str, contract: dict[str, Any], acceptance: list[str]) -> TrivialUnit:
    """An express app whose routes answer their first declared status, or ?status= if declared."""
    file = _declared_file(contract, ".js", "code/server.js")
    table = routes(contract)
    lines = [
        f"// {unit_id}: a trivial express app. Each route answers its lowest declared status,",
        "// or the one asked for with ?status= when the contract declares that one too.",
        "const express = require('express');",
        "",
        "const app = express();",
        "app.use(express.json());",
        "",
        "function answer(statuses) {",
        "  return (req, res) => {",
        "    const asked = Number(req.query.status);",
        "    const status = statuses.includes(asked) ? asked : statuses[0];",
        f"    res.status(status).json({{ unit: {_js(unit_id)}, status }});",
        "  };",
        "}",
        "",
        *(f"app.{r.method}({_js(r.path)}, answer({list(r.statuses)}));" for r in table),
        "",
        "module.exports = app;",
    ]
    tests = [
        "import request from 'supertest';",
        "import { describe, it, expect } from 'vitest';",
        f"import app from {_js(_depth(file))};",
        "",
        f"describe({_js(unit_id)}, () => {{",
    ]
    for i, criterion in enumerate(acceptance):
        r = table[i % len(table)]
        tests += _request_test(criterion, r, r.sample, r.statuses[0])
    for status in declared_statuses(contract):
        r = next((r for r in table if status in r.statuses), table[0])
        tests += _request_test(
            f"{r.label} answers {status}", r, f"{r.sample}?status={status}", status
        )
    tests.append("});")
    return TrivialUnit(
        code={file: "\n".join(lines) + "\n"},
        tests={f"tests/{unit_id}.spec.js": "\n".join(tests) + "\n"},
    )


def _request_test(name: str, route: Route, path: str, status: int) -> list[str]:
    return [
        f"  it({_js(name)}, async () => {{",
        f"    const r = await request(app).{route.method}({_js(path)});",
        f"    expect(r.status).toBe({status});",
        "  });",
    ]


def _pascal(unit_id: str) -> str:
    words = re.findall(r"[A-Za-z0-9]+", unit_id)
    name = "".join(w[:1].upper() + w[1:] for w in words) or "Unit"
    return name if name[0].isalpha() else f"Unit{name}"


def fe_unit(unit_id: str, contract: dict[str, Any], acceptance: list[str]) -> TrivialUnit:
    """A Vue SFC that renders its unit id; declared statuses get an ES module helper."""
    file = _declared_file(contract, ".vue", f"code/{_pascal(unit_id)}.vue")
    sfc = "\n".join(
        [
            "<script setup>",
            f"// {unit_id}: a trivial component that renders its unit id.",
            f"defineProps({{ unit: {{ type: String, default: {_js(unit_id)} }} }});",
            "</script>",
            "",
            "<template>",
            '  <p data-test="unit">{{ unit }}</p>',
            "</template>",
            "",
        ]
    )
    code = {file: sfc}
    statuses = declared_statuses(contract)
    tests = [
        "import { mount } from '@vue/test-utils';",
        "import { describe, it, expect } from 'vitest';",
        f"import Component from {_js(_depth(file))};",
    ]
    if statuses:
        code["code/status.js"] = (
            f"// {unit_id}: the declared statuses, and 500 for any other.\n"
            f"const STATUSES = {statuses};\n\n"
            "export function respond(status) {\n"
            "  return STATUSES.includes(status) ? status : 500;\n"
            "}\n"
        )
        tests.append("import { respond } from '../code/status.js';")
    tests += ["", f"describe({_js(unit_id)}, () => {{"]
    for criterion in acceptance:
        tests += [
            f"  it({_js(criterion)}, () => {{",
            "    const wrapper = mount(Component);",
            f"    expect(wrapper.find('[data-test=unit]').text()).toBe({_js(unit_id)});",
            "  });",
        ]
    tests += _respond_tests(statuses) + ["});"]
    return TrivialUnit(code=code, tests={f"tests/{unit_id}.spec.js": "\n".join(tests) + "\n"})


def _respond_tests(statuses: list[int]) -> list[str]:
    out = []
    for status in statuses:
        out += [
            f"  it('respond({status}) answers {status}', () => {{",
            f"    expect(respond({status})).toBe({status});",
            "  });",
        ]
    return out


def module_unit(unit_id: str, contract: dict[str, Any], acceptance: list[str]) -> TrivialUnit:
    """A CommonJS module with ready() (and respond() when statuses are declared)."""
    file = _declared_file(contract, ".js", "code/index.js")
    statuses = declared_statuses(contract)
    lines = [
        f"// {unit_id}: a trivial module.",
        "function ready() {",
        f"  return {_js(unit_id)};",
        "}",
        "",
    ]
    exported = ["ready"]
    if statuses:
        lines += [
            f"const STATUSES = {statuses};",
            "",
            "function respond(status) {",
            "  return STATUSES.includes(status) ? status : 500;",
            "}",
            "",
        ]
        exported.append("respond")
    lines.append(f"module.exports = {{ {', '.join(exported)} }};")
    tests = [
        "import { describe, it, expect } from 'vitest';",
        f"import unit from {_js(_depth(file))};",
        "",
        *(["const { respond } = unit;", ""] if statuses else []),
        f"describe({_js(unit_id)}, () => {{",
    ]
    for criterion in acceptance:
        tests += [
            f"  it({_js(criterion)}, () => {{",
            f"    expect(unit.ready()).toBe({_js(unit_id)});",
            "  });",
        ]
    tests += _respond_tests(statuses) + ["});"]
    return TrivialUnit(
        code={file: "\n".join(lines) + "\n"},
        tests={f"tests/{unit_id}.spec.js": "\n".join(tests) + "\n"},
    )


def node_unit(
    unit_id: str, kind: str, contract: dict[str, Any], acceptance: list[str]
) -> TrivialUnit:
    """The trivial files of a node unit of this kind."""
    make = {"be": be_unit, "fe": fe_unit}.get(kind, module_unit)
    return make(unit_id, contract, acceptance)
