"""A normal install, as worker servers and images use: the wheel built from this tree,
installed into a fresh venv outside the checkout, runs the demo (as `make demo` shows it:
the red/green retry, its closing hint run as printed, its report, its assembled app) and a
scaffolded project (its prompts, toolchains and examples travel inside the package)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from devloop.llm.stub import StubServer
from tests.conftest import REPO
from tests.proctree import kill_tree, run_bounded
from tests.workers.printed import argv_env, harvest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SPEC = """\
company_id: c-acme
project_id: p-one
stack: python
units:
  - id: one
    kind: lib
    exports: {module: {code/one.py: {"one()": "-> int"}}}
    acceptance: ["one() returns 1"]
"""


def test_a_wheel_in_a_fresh_venv_runs_the_demo_and_a_new_project(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    built = run_bounded([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                         str(wheels), str(REPO)], timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = wheels.glob("devloop-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for data in ("devloop/_data/prompts/coder.md", "devloop/_data/toolchains/node/package.json",
                 "devloop/_data/toolchains/python/requirements.txt",
                 "devloop/_data/examples/todo/stub.yaml",
                 "devloop/runners/channel/vitest_reporter.mjs"):
        assert data in names, data
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = run_bounded([str(venv / "bin/pip"), "install", "-q", str(wheel)], timeout=600)
    assert installed.returncode == 0, installed.stderr[-2000:]
    devloop = str(venv / "bin/devloop")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_", "PYTHONPATH"))}
    away = tmp_path / "home"  # nowhere near the checkout
    away.mkdir()
    demo = run_bounded([devloop, "demo", "--out-dir", "out"], cwd=away,
                       env={**env, "COLUMNS": "200"}, timeout=600)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    the_demo_as_make_demo_shows_it(demo.stdout, away, devloop, env)
    (away / "spec.yaml").write_text(SPEC)
    assert run_bounded([devloop, "new", "one", "--from", "spec.yaml"], cwd=away, env=env,
                       timeout=120).returncode == 0
    done = run_bounded([devloop, "run", "one", "--llm", "stub"], cwd=away, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def the_demo_as_make_demo_shows_it(out: str, cwd: Path, devloop: str,
                                   env: dict[str, str]) -> None:
    """The todo demo's red/green retry and both units passing; its closing hint, report and
    assembled app."""
    assert "todo-be: passed after 2 attempt(s)" in out and "todo-fe: passed after 1" in out
    assert "red   run-1-1" in out and "expected 400, got 500" in out
    assert "green run-2-1: 6/6 tests passed" in out
    assert "bugs: 1 opened, 1 fixed" in out
    assert "scripted" in out
    [run_dir] = (cwd / "out").iterdir()
    run_the_closing_hint_as_printed(out, run_dir, cwd, devloop)
    assert (run_dir / "report.html").is_file()
    result = json.loads((run_dir / "units/todo-be/runs/run-2-1/result.json").read_text())
    assert result["ok"] is True
    # todo-app served todo-be's real app from its passed code, and the three are one app.
    assert "todo-app: passed after 1 attempt(s)" in out
    made = run_bounded([devloop, "assemble", str(run_dir), str(cwd / "app")], env=env,
                       timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    assert "smoke check (node): smoke check passed: 3 modules, 1 components" in made.stdout


def run_the_closing_hint_as_printed(out: str, run_dir: Path, cwd: Path, devloop: str) -> None:
    """The demo's closing hint runs the folder with Claude, the key as the hint gives it (a
    stub that accepts only that key stands in for the API); the model's first call ends it."""
    [hint] = [c for c in harvest(out) if c.startswith("ANTHROPIC_API_KEY=")]
    # The folder as the demo was given it (`--out-dir out`): the hint works from where it ran.
    assert hint == f"ANTHROPIC_API_KEY=... devloop run {run_dir.relative_to(cwd)} --llm anthropic"
    with StubServer(run_dir / "stub.yaml", api_key="...") as claude:
        argv, env = argv_env(hint, devloop, ANTHROPIC_BASE_URL=claude.base_url)
        env.pop("PYTHONPATH", None)  # the wheel's code runs, never the checkout's
        with open(cwd / "hint.out", "wb") as sink:
            run = subprocess.Popen(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while not claude.requests:
                assert run.poll() is None, (cwd / "hint.out").read_text()
                assert time.monotonic() < deadline, (cwd / "hint.out").read_text()
                time.sleep(0.2)
            run.send_signal(signal.SIGINT)
            assert run.wait(timeout=60) == 130, (cwd / "hint.out").read_text()
        finally:
            if run.poll() is None:
                kill_tree(run.pid)
                run.wait(timeout=30)
    assert claude.requests[0].status != 401  # the key it was given is the one printed
