"""The python venv's bytecode tree: a sandbox reads the stdlib's and the packages' caches
from it (none is compiled again per run), while the view's own files keep no cache a
command could plant for the next one, and a command may still compile them."""

from __future__ import annotations

from pathlib import Path

from devloop.project.toolchain import bytecode_binds
from devloop.sandbox import BwrapSandbox
from devloop.sandbox.base import PYCACHE_PREFIX
from tests.runners.conftest import MakeView

UNIT = "units/todo-py"


def _run(sandbox: BwrapSandbox, venv: Path, view: Path, command: str) -> tuple[int, str]:
    obs = sandbox.run(command, view=view, cwd=UNIT, writable=["units/todo-py/code"],
                      timeout_s=60,
                      ro_binds=[(venv, str(venv)), *bytecode_binds(venv)])
    return obs.exit_code, obs.stdout + obs.stderr


def test_the_stdlib_and_pytest_load_from_the_tree_and_the_view_s_files_from_source(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    code, out = _run(sandbox, python_toolchain_dir, view,
                     f"cd code && {python_toolchain_dir}/bin/python -v "
                     "-c 'import json, pytest, todo' 2>&1 | grep '^# code object from'")
    assert code == 0, out
    loaded = [line.split("from ", 1)[1].strip("'") for line in out.splitlines()
              if line.startswith("# code object from")]
    assert any(p.startswith(f"{PYCACHE_PREFIX}/usr/lib/python3") and "/json/" in p
               for p in loaded), out
    assert any(p.startswith(f"{PYCACHE_PREFIX}/") and "/_pytest/" in p for p in loaded), out
    # The unit's own module: compiled from its source, never read from a cache.
    assert "/project/units/todo-py/code/todo.py" in loaded, out


def test_a_command_may_still_compile_the_view_s_files_and_cannot_write_the_tree(
    sandbox: BwrapSandbox, python_toolchain_dir: Path, make_view: MakeView
) -> None:
    view = make_view("python/todo-py")
    python = f"{python_toolchain_dir}/bin/python"
    code, out = _run(sandbox, python_toolchain_dir, view,
                     f"{python} -m py_compile code/todo.py && echo compiled")
    assert (code, out.strip()) == (0, "compiled"), out
    assert not list((view / UNIT).rglob("__pycache__"))  # on the sandbox's private /tmp
    stdlib_cache = f"{PYCACHE_PREFIX}/usr/lib/python3.11/json/__init__.cpython-311.pyc"
    code, out = _run(sandbox, python_toolchain_dir, view,
                     f"echo planted > {stdlib_cache}; "
                     f"{python} -c 'import json; print(json.dumps(1))'")
    assert (code, out.splitlines()[0]) == (0, "1") and "Read-only file system" in out, out
