"""Units that compose, end to end on the fleet: a dependent unit's code imports its
dependency's passed code and its tests run against it (python: the README's quick start,
`cart` on `money`; node: an Express unit on a better-sqlite3 unit), all passed.

The stub's scripted turns stand in for the model; what they write is real code and real
tests, and the runs are real pytest and vitest in the sandbox.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.workers.test_run_ends import devloop

pytestmark = pytest.mark.timeout(900)

MONEY = '''\
"""Integer cents: sums and how they read."""


def add(a_cents: int, b_cents: int) -> int:
    """The sum of two amounts in cents."""
    return a_cents + b_cents


def format_cents(cents: int) -> str:
    """Dollars with two decimals: 350 -> "$3.50"."""
    return f"${cents // 100}.{cents % 100:02d}"
'''
MONEY_TESTS = '''\
from money import add, format_cents


def test_add_250_and_100_returns_350() -> None:
    """add(250, 100) returns 350"""
    assert add(250, 100) == 350


def test_format_cents_350_returns_dollars() -> None:
    """format_cents(350) returns "$3.50" """
    assert format_cents(350) == "$3.50"
'''
CART = '''\
"""A cart's total and receipt, in money's terms."""

from functools import reduce

from units.money import add, format_cents


def total(prices_cents: list[int]) -> int:
    """The sum of the prices, added by money.add."""
    return reduce(add, prices_cents, 0)


def receipt(prices_cents: list[int]) -> str:
    """One line per price, then the total, each formatted by money.format_cents."""
    lines = [format_cents(p) for p in prices_cents]
    return "\\n".join([*lines, f"total {format_cents(total(prices_cents))}"])
'''
# The real money formats: "$3.50" is money's doing, not cart's.
CART_TESTS = '''\
from cart import receipt, total


def test_total_of_no_prices_returns_0() -> None:
    """total([]) returns 0"""
    assert total([]) == 0


def test_total_of_250_and_100_returns_350() -> None:
    """total([250, 100]) returns 350"""
    assert total([250, 100]) == 350


def test_receipt_ends_with_the_total() -> None:
    """receipt([250, 100]) ends with the line "total $3.50" """
    assert receipt([250, 100]).splitlines() == ["$2.50", "$1.00", "total $3.50"]
'''

NOTES = """\
company_id: c-acme
project_id: p-notes
stack: node
units:
  - id: notes-db
    kind: db
    exports:
      module:
        code/db.js:
          "openDb()": "-> {add(text) -> {id, text}, all() -> [{id, text}]}, in memory"
    acceptance:
      - add(text) returns {id, text} with ids counting up from 1
  - id: notes-api
    kind: be
    depends_on: [notes-db]
    exports:
      http:
        - method: POST
          path: /api/notes
          request: {text: string}
          responses: {"201": {id: number, text: string}, "400": {error: '"text_required"'}}
        - method: GET
          path: /api/notes
          responses: {"200": {items: "[{id, text}]"}}
      module:
        code/server.js: module.exports = app (an Express app, JSON body parser on)
    consumes:
      - {unit: notes-db, uses: [openDb]}
    acceptance:
      - A note POSTed to /api/notes is listed by GET /api/notes
      - An empty text returns 400 with error "text_required"
"""
DB = """\
// Notes on better-sqlite3, in memory.
const Database = require('better-sqlite3');

function openDb() {
  const db = new Database(':memory:');
  db.exec('CREATE TABLE notes (id INTEGER PRIMARY KEY AUTOINCREMENT, text TEXT NOT NULL)');
  const insert = db.prepare('INSERT INTO notes (text) VALUES (?)');
  const byId = db.prepare('SELECT id, text FROM notes WHERE id = ?');
  const every = db.prepare('SELECT id, text FROM notes ORDER BY id');
  return {
    add: (text) => byId.get(insert.run(text).lastInsertRowid),
    all: () => every.all(),
  };
}

module.exports = { openDb };
"""
DB_TESTS = """\
import { describe, it, expect } from 'vitest';
import { openDb } from '../code/db.js';

describe('notes-db', () => {
  it('add(text) returns {id, text} with ids counting up from 1', () => {
    const db = openDb();
    expect(db.add('milk')).toEqual({ id: 1, text: 'milk' });
    expect(db.add('eggs')).toEqual({ id: 2, text: 'eggs' });
  });
});
"""
SERVER = """\
// The notes API over notes-db's repository.
const express = require('express');
const { openDb } = require('@units/notes-db/db.js');

const app = express();
app.use(express.json());
const notes = openDb();

app.post('/api/notes', (req, res) => {
  const text = req.body && req.body.text;
  if (!text) return res.status(400).json({ error: 'text_required' });
  return res.status(201).json(notes.add(text));
});
app.get('/api/notes', (req, res) => res.status(200).json({ items: notes.all() }));

module.exports = app;
"""
SERVER_TESTS = """\
import request from 'supertest';
import { describe, it, expect } from 'vitest';
import app from '../code/server.js';

describe('notes-api', () => {
  it('A note POSTed to /api/notes is listed by GET /api/notes', async () => {
    const made = await request(app).post('/api/notes').send({ text: 'milk' });
    expect(made.status).toBe(201);
    const listed = await request(app).get('/api/notes');
    expect(listed.status).toBe(200);
    expect(listed.body.items).toContainEqual(made.body);
  });
  it('An empty text returns 400 with error "text_required"', async () => {
    const r = await request(app).post('/api/notes').send({ text: '' });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({ error: 'text_required' });
  });
});
"""


def quick_start_spec() -> str:
    """The spec.yaml the README's quick start shows."""
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## Running a real project")]
    found = re.search(r"```yaml\n(.*?)```", quick, re.S)
    assert found is not None
    return found.group(1)


def write_instead(script: dict[str, Any], unit: str, top: str, files: dict[str, str]) -> None:
    """Have the unit's session write `files` instead of what the generated script wrote
    under `top` (code/ or tests/): its row of the script's `units:` table."""
    script["units"][unit][top.rstrip("/")] = files


def scaffold_with(tmp_path: Path, spec: str, name: str,
                  files: dict[tuple[str, str], dict[str, str]]) -> Path:
    """`devloop new` from spec, the stub script's writes replaced per (unit, top)."""
    (tmp_path / "spec.yaml").write_text(spec)
    folder = tmp_path / name
    made = devloop("new", str(folder), "--from", str(tmp_path / "spec.yaml"))
    assert made.returncode == 0, made.stderr
    script = yaml.safe_load((folder / "stub.yaml").read_text())
    for (unit, top), written in files.items():
        write_instead(script, unit, top, written)
    (folder / "stub.yaml").write_text(yaml.safe_dump(script, sort_keys=False))
    return folder


def assert_all_passed(folder: Path, units: list[str]) -> None:
    done = devloop("run", str(folder), "--llm", "stub", "--workers", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for unit in units:
        result = json.loads((folder / f"units/{unit}/runs/run-1-1/result.json").read_text())
        assert result["ok"] and result["summary"]["failed"] == 0, (unit, result)
        assert result["adequacy"]["criteria_proven"] == 1.0, (unit, result["adequacy"])


def test_the_quick_starts_cart_runs_against_the_real_money(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    folder = scaffold_with(tmp_path, quick_start_spec(), "shop", {
        ("money", "code/"): {"code/money.py": MONEY},
        ("money", "tests/"): {"tests/test_money.py": MONEY_TESTS},
        ("cart", "code/"): {"code/cart.py": CART},
        ("cart", "tests/"): {"tests/test_cart.py": CART_TESTS},
    })
    assert_all_passed(folder, ["money", "cart"])
    result = json.loads((folder / "units/cart/runs/run-1-1/result.json").read_text())
    assert result["summary"]["passed"] == 3


@pytest.mark.slow
def test_a_be_unit_runs_on_the_db_unit_it_requires(
    tmp_path: Path, node_toolchain_dir: Path
) -> None:
    folder = scaffold_with(tmp_path, NOTES, "notes", {
        ("notes-db", "code/"): {"code/db.js": DB},
        ("notes-db", "tests/"): {"tests/db.spec.js": DB_TESTS},
        ("notes-api", "code/"): {"code/server.js": SERVER},
        ("notes-api", "tests/"): {"tests/server.spec.js": SERVER_TESTS},
    })
    assert_all_passed(folder, ["notes-db", "notes-api"])
