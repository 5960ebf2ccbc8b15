"""A passed unit whose spec.json, SDD section or upstream contract changed runs again as a
retry with the change as its hint; `devloop run --rerun UNIT` runs one again on request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.fleet.builder import UnitPlan, build, script
from tests.workers.test_run_ends import devloop

# The runs here take one worker: their units wait on each other (docs/codebase.md, the
# suite's time). The default of two is run by the demo, supervision, chaos and console tests.
pytestmark = pytest.mark.timeout(900)


def coder_steps(project: Path, unit: str) -> list[dict[str, object]]:
    steps = [json.loads(line) for line in (project / "agent-state/fleet-steps.ndjson").open()]
    return [s["msg"] for s in steps if s["role"] == "coder" and s["msg"]["unit_id"] == unit]


def test_edited_definitions_run_passed_units_again_as_retries(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    plans = [UnitPlan("a"), UnitPlan("b", ["a"])]
    p = build(tmp_path / "p", plans)
    (p / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    assert devloop("run", str(p), "--llm", "stub", "--workers", "1").returncode == 0

    # A criterion of a's spec.json reworded (the run wrote the spec it derived from the SDD).
    spec = p / "units/a/spec.json"
    data = json.loads(spec.read_text())
    data["acceptance_criteria"] = ["value() returns the int 42"]
    spec.write_text(json.dumps(data, indent=2))
    again = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert ('a: spec.json changed, acceptance criteria added: "value() returns the int 42", '
            'removed: "value() returns 42"; running it again as attempt 2\n') in again.stdout
    assert [(m["attempt"], m["mode"]) for m in coder_steps(p, "a")] == [(1, "implement"),
                                                                        (2, "retry")]
    assert [m["attempt"] for m in coder_steps(p, "b")] == [1]  # its contract did not change

    # b's SDD section edited (its spec.json, already on disk, stays as it was).
    sdd = p / "sdd/mvcp/units.html"
    head, tail = sdd.read_text().split('<section data-unit-id="b">')
    sdd.write_text(head + '<section data-unit-id="b"><p>Now with a note.</p>' + tail)
    third = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert third.returncode == 0, third.stdout + third.stderr
    assert "b: SDD section changed; running it again as attempt 2\n" in third.stdout
    assert "a: " not in third.stdout  # nothing changed for a since it last ran

    # Asked for by name; a misspelt name is refused before anything starts.
    rerun = devloop("run", str(p), "--llm", "stub", "--workers", "1", "--rerun", "a")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "a: asked for with --rerun; running it again as attempt 3\n" in rerun.stdout
    assert [m["mode"] for m in coder_steps(p, "a")][-1] == "retry"
    typo = devloop("run", str(p), "--llm", "stub", "--workers", "1", "--rerun", "aa")
    assert typo.returncode == 2
    assert typo.stderr.splitlines() == ['--rerun: aa: no unit "aa"; did you mean "a"?']


def test_a_dependency_passing_again_with_other_code_re_tests_every_passed_unit_downstream(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    """a's second attempt passes with other code (40 + 2): b and c, which ran against the
    first, are tested again against it by their tester alone, and say why."""
    plans = [UnitPlan("a", coder=["good", "good2"]), UnitPlan("b", ["a"]), UnitPlan("c", ["b"])]
    p = build(tmp_path / "p", plans)
    (p / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    assert devloop("run", str(p), "--llm", "stub", "--workers", "1").returncode == 0
    again = devloop("run", str(p), "--llm", "stub", "--workers", "1", "--rerun", "a")
    assert again.returncode == 0, again.stdout + again.stderr
    steps = [json.loads(line) for line in (p / "agent-state/fleet-steps.ndjson").open()]
    for unit in ("b", "c"):
        mine = [(s["role"], s["attempt"], s["worker"]) for s in steps
                if s["msg"]["unit_id"] == unit and s["role"] in ("coder", "tester")]
        # attempt 2 ran no coder: the loop recorded the step it skipped
        assert ("coder", 2, "loop") in mine and ("tester", 2) in [(r, a) for r, a, _ in mine]
        decided = [s["status"] for s in steps if s["msg"]["unit_id"] == unit
                   and s["role"] == "decide"]
        assert decided == ["pass", "pass"]
    events = [json.loads(line) for line in (p / "timeline.ndjson").open()]
    retests = [e for e in events if e["kind"] == "loop_retest"]
    assert sorted(e["unit_id"] for e in retests) == ["b", "c"]
    assert retests[0]["summary"] == (
        "re-test: a passed again with changed code or contract; re-testing against it")
    assert (p / "units/b/runs/run-2-1/result.json").is_file()
