"""The fleet under the seeded imperfect model: slips cost turns, not the unit."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devloop.scaffold import scaffold
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.fleet import fleet

SPEC = """\
company_id: c-t
project_id: p-slips
stack: python
units:
  - id: calc
    kind: lib
    exports: {module: {code/calc.py: {"total()": "-> int", "name()": "-> str"}}}
    acceptance: [total() returns 0, name() returns the unit id]
"""


@pytest.mark.timeout(240)
def test_a_unit_whose_model_slips_every_way_still_ends_green(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path
) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    scaffold(tmp_path / "spec.yaml", tmp_path / "p")
    script = yaml.safe_load((tmp_path / "p" / "stub.yaml").read_text())
    # Every slip on every working turn: a wrong first fix, a weak test, a malformed call,
    # a forgotten record, tests first, a repeated edit, an early end and a ramble.
    script["imperfect"] = {"seed": 5, "rate": 1.0}
    with fleet(redis_store, redis_server.celery_url, tmp_path / "p", script) as f:
        final = f.wait(timeout_s=200)
        coder, tester = (f.requests(f"{role}.c-t.p-slips.calc") for role in ("coder", "tester"))
    [unit] = final.units
    assert final.all_passed, final
    # The wrong first fix cost one chain (its tests went red); every other slip cost turns
    # within a session: the script plays each attempt in two.
    assert unit.attempt == 2
    assert len(coder) > 2 * 2 and len(tester) > 2
    files = redis_store.unit_files(f.pid, "calc").files
    assert b"or True" not in files["tests/test_calc.py"]  # the weak test did not stand
    assert b"return None" not in files["code/calc.py"]  # nor the wrong fix
