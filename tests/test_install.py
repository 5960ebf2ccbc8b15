"""A normal install, as worker servers and images use: the wheel built from this tree,
installed into a fresh venv outside the checkout, runs the demo and a scaffolded project
(its prompts, toolchains and examples travel inside the package)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.proctree import run_bounded

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
    demo = run_bounded([devloop, "demo", "--out-dir", "out"], cwd=away, env=env, timeout=600)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "todo-be: passed after 2 attempt(s)" in demo.stdout
    (away / "spec.yaml").write_text(SPEC)
    assert run_bounded([devloop, "new", "one", "--from", "spec.yaml"], cwd=away, env=env,
                       timeout=120).returncode == 0
    done = run_bounded([devloop, "run", "one", "--llm", "stub"], cwd=away, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
