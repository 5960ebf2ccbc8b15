"""`devloop assemble`: the passed units as one program per stack, smoke-checked in the
sandbox; the commands it prints run as printed; what has not passed is left out, saying why."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

from devloop.safe.safedir import Refused
from devloop.upstream.assemble import write_tree
from tests.conftest import REPO
from tests.workers.test_cli_run import devloop
from tests.workers.test_compose import quick_start_spec

pytestmark = pytest.mark.timeout(600)

WEB = """\
company_id: c-acme
project_id: p-web
stack: node
units:
  - id: api
    kind: be
    exports:
      http:
        - {method: GET, path: /api/items, responses: {"200": {items: "[string]"}}}
      module: {code/server.js: module.exports = app}
    acceptance: [GET /api/items answers 200]
  - id: ui
    kind: fe
    depends_on: [api]
    exports:
      components: [{name: ItemList, file: code/ItemList.vue}]
    consumes: [{unit: api, http: GET /api/items}]
    acceptance: [Lists the items when mounted]
"""


def passed_folder(tmp_path: Path, spec: str, name: str) -> Path:
    """A folder scaffolded from spec and run green under its stub script."""
    (tmp_path / "spec.yaml").write_text(spec)
    assert devloop("new", name, "--from", "spec.yaml", cwd=tmp_path).returncode == 0
    done = devloop("run", name, "--llm", "stub", "--workers", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return tmp_path / name


def printed(stdout: str, label: str) -> str:
    """The command after `label` in assemble's output."""
    found = re.search(rf"^{label}\s+(.+)$", stdout, re.M)
    assert found, stdout
    return found.group(1)


def test_the_quick_start_assembles_as_the_docs_show_and_its_check_runs(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    passed_folder(tmp_path, quick_start_spec(), "shop")
    done = devloop("assemble", "shop", "shop-app", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    guide = (REPO / "docs/user-guide.md").read_text()
    for doc in ((REPO / "docs/architecture.md").read_text(), guide):
        assert f"$ devloop assemble shop shop-app\n{done.stdout}```" in doc
    check = subprocess.run(["bash", "-c", printed(done.stdout, "check it:")], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    assert check.stdout.splitlines() == ["imported units.cart.cart", "imported units.money.money",
                                         "smoke check passed: 2 modules"]
    # The user guide's way to use the result from one's own program, run as it shows it.
    use = next(line for line in guide.splitlines()
               if line.startswith("PYTHONPATH=shop-app/python "))
    used = subprocess.run(["bash", "-c", use], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert used.returncode == 0 and used.stdout.strip(), used.stderr
    assert "from units.money import add, format_cents" in (
        tmp_path / "shop-app/python/units/cart/cart.py").read_text()


def test_code_changed_after_its_green_run_is_left_out_with_what_needs_it(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    folder = passed_folder(tmp_path, quick_start_spec(), "shop")
    (folder / "units/money/code/money.py").write_text("def add(a, b):\n    return 0\n")
    done = devloop("assemble", "shop", "out", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout.splitlines()[:3] == [
        "assembled into out: nothing (no unit has passed)",
        "left out: money: its code/ changed after its latest green run",
        "left out: cart: it depends on money, which is left out",
    ]
    taken = devloop("assemble", "shop", "out", cwd=tmp_path)
    assert taken.returncode == 2
    assert taken.stderr.splitlines() == [
        "out: OUT: exists and is not an empty directory; fix: name a new directory (or empty "
        "this one)"]


@pytest.mark.slow
def test_a_node_project_runs_as_one_server_with_the_printed_command(
    tmp_path: Path, node_toolchain_dir: Path
) -> None:
    passed_folder(tmp_path, WEB, "web")
    done = devloop("assemble", "web", "web-app", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "smoke check (node): smoke check passed: 1 modules, 1 components" in done.stdout
    command = printed(done.stdout, "run it:")
    server = subprocess.Popen(["bash", "-c", command], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env={**os.environ, "PORT": "0"}, start_new_session=True)
    try:
        assert server.stdout is not None
        lines = []
        for line in server.stdout:  # npm install, then the server's first line
            lines.append(line)
            if line.startswith("listening on "):
                break
        else:
            pytest.fail("the server never listened:\n" + "".join(lines[-30:]))
        url = line.split()[-1]
        with urllib.request.urlopen(f"{url}/api/items", timeout=10) as reply:
            assert reply.status == 200
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_out_is_written_through_no_link_planted_in_it(tmp_path: Path, todo_project: Path) -> None:
    # OUT itself a link (to an empty dir, so it looks new): refused before anything runs.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.symlink_to(elsewhere)
    done = devloop("assemble", str(todo_project), str(out))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"{out}: OUT: is a symbolic link")
    # A link inside OUT on the way to a file (planted after OUT was found empty).
    out.unlink()
    out.mkdir()
    (out / "python").symlink_to(elsewhere)
    with pytest.raises(Refused) as refused:
        write_tree(out, {"README.md": b"readme\n", "python/smoke.py": b"print()\n"})
    assert refused.value.reason == "passes through a symlink (python)"
    assert not any(elsewhere.iterdir()) and sorted(p.name for p in out.iterdir()) == ["python"]
