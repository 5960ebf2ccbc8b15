"""`devloop run` and `devloop demo` as a user runs them: real processes end to end. (The
todo demo itself, with its closing hint run as printed, runs from the wheel in
tests/test_install.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devloop.server.redis_server import server_build
from tests.fleet.builder import UnitPlan, build, script
from tests.plant import plant_pyc
from tests.proctree import run_bounded

DEVLOOP = str(Path(sys.executable).parent / "devloop")


def devloop(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    return run_bounded([DEVLOOP, *args], cwd=cwd, env={**clean, "COLUMNS": "200", **(env or {})},
                       timeout=timeout)


@pytest.mark.timeout(120)
def test_the_inventory_demo_passes_and_assembles_into_one_package_tree(tmp_path: Path) -> None:
    done = devloop("demo", "--example", "inventory", "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = (tmp_path / "out").iterdir()
    made = devloop("assemble", str(run_dir), str(tmp_path / "app"))
    assert made.returncode == 0, made.stdout + made.stderr
    assert made.stdout.splitlines()[:2] == [
        f"assembled into {tmp_path / 'app'}: python (orders, pricing, reports, stock-db)",
        "smoke check (python): smoke check passed: 4 modules",
    ]


@pytest.mark.timeout(120)
def test_a_blocked_unit_exits_1_and_a_second_run_resumes(tmp_path: Path) -> None:
    plans = [UnitPlan("bad", bad=True), UnitPlan("after", ["bad"]), UnitPlan("good")]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    plant_pyc(project / "units/good/code")  # as a local pytest run leaves one
    first = devloop("run", str(project), "--llm", "stub", "--workers", "2")
    assert first.returncode == 1, first.stdout + first.stderr
    # The first line names the server it starts, as its binary reports itself.
    assert first.stdout.splitlines()[0] == f"starting {server_build()} and 2 worker(s)..."
    assert "blocked_upstream" in first.stdout
    assert ("not imported: units/good/code/__pycache__/: a bytecode cache (__pycache__), not "
            "source (DevLoop never runs it or writes it back)") in first.stdout.splitlines()
    timeline = (project / "timeline.ndjson").read_text()
    again = devloop("run", str(project), "--llm", "stub", "--workers", "1")
    assert again.returncode == 1
    assert (project / "timeline.ndjson").read_text() == timeline  # nothing ran twice


def test_bad_input_exits_2_before_anything_starts(tmp_path: Path) -> None:
    project = build(tmp_path / "p", [UnitPlan("a", ["ghost"])])
    done = devloop("run", str(project), "--llm", "stub")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        'units.json: units[0].depends_on: unknown unit "ghost"; '
        'fix: add "ghost" to units or remove it from depends_on'
    ]
    assert not (project / ".devloop").exists()
    ok = build(tmp_path / "q", [UnitPlan("a")])
    no_key = devloop("run", str(ok))
    assert no_key.returncode == 2
    assert no_key.stderr.startswith("ANTHROPIC_API_KEY: environment: not set; fix:")


def test_source_a_reader_would_misread_refuses_the_run_before_anything_starts(
    tmp_path: Path,
) -> None:
    project = build(tmp_path / "p", [UnitPlan("a")])
    (project / "units/a/code").mkdir(parents=True)
    (project / "units/a/code/unit.py").write_text('ADMIN = "admin\u202e"\n')
    done = devloop("run", str(project), "--llm", "stub")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "units/a/code/unit.py: content: holds the bidi control U+202E on line 1 (Trojan "
        "Source: it reorders what a reader sees); fix: write it as an escape (\\u202e) or "
        "remove it"]
    assert not (project / ".devloop").exists()


def test_a_model_without_a_price_is_refused_at_start_and_the_printed_fix_works(
    tmp_path: Path,
) -> None:
    # Priced at 0, every cap (--max-usd, the session's) would fail open: refused instead.
    plans = [UnitPlan("a")]
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    model = {"DEVLOOP_MODEL": "claude-3-7-sonnet-latest"}
    refused = devloop("run", str(project), "--llm", "stub", "--max-usd", "0.01", env=model)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith(
        "DEVLOOP_MODEL: environment: no price for model 'claude-3-7-sonnet-latest', so the "
        "spend caps (DEVLOOP_SESSION_MAX_USD, --max-usd) could not be kept; fix: ")
    assert not (project / ".devloop").exists()
    fix = refused.stderr.strip().split("): ", 1)[1]
    assert fix.startswith("export DEVLOOP_PRICES_JSON=")
    priced = run_bounded(
        ["bash", "-c", f'{fix} && "$0" run "$1" --llm stub --workers 1', DEVLOOP, str(project)],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("DEVLOOP_REDIS")},
             **model}, timeout=300)
    assert priced.returncode == 0, priced.stdout + priced.stderr
    assert "cost:   $0.0" in priced.stdout and "$0.0000" not in priced.stdout


def test_version_and_a_missing_folder_are_one_line_each(tmp_path: Path) -> None:
    version = devloop("--version", timeout=60)
    assert version.returncode == 0, version.stderr
    assert re.fullmatch(r"devloop \d+\.\d+\.\d+ \(embedded server: (Valkey|Redis) "
                        r"\d+\.\d+\.\d+\)\n", version.stdout), version.stdout
    assert f"(embedded server: {server_build()})" in version.stdout
    missing = tmp_path / "no/such/dir"
    for command in (["run", str(missing), "--llm", "stub"], ["validate", str(missing)]):
        done = devloop(*command, timeout=60)
        assert done.returncode == 2, done.stdout + done.stderr
        assert done.stderr.splitlines() == [
            f"{missing}: folder: does not exist; fix: pass the project folder (the one holding "
            "units.json), or make one with `devloop new DIR --from spec.yaml`"
        ]
    assert not missing.exists()
