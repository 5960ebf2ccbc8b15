"""Editing the spec and running again, unblocking, and `devloop reset`, as a user does it:
the real `devloop` command, real workers, Redis, bubblewrap and pytest, the stub model."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from devloop.core.config import load_settings
from devloop.project.load import load_project
from devloop.server.embedded import redis_endpoint
from devloop.server.redis_server import connect
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.proctree import kill_tree, run_bounded

DEVLOOP = str(Path(sys.executable).parent / "devloop")
README = Path(__file__).resolve().parents[2] / "README.md"
NEW_CRITERION = "add(0, 0) returns 0"
BLOCKING_CRITERION = "add(0, 5) returns 5"
ROLE_PARTS = ("code", "tests", "runs", "contract.json", "coder.log")

# The runs here take one worker: their units wait on each other (docs/codebase.md, the
# suite's time). The default of two is run by the demo, supervision, chaos and console tests.
pytestmark = pytest.mark.timeout(900)


def devloop(*args: str, cwd: Path | None = None, input: str | None = None,
            timeout: float = 400) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    return run_bounded([DEVLOOP, *args], cwd=cwd, env={**env, "COLUMNS": "200"},
                       input=input, timeout=timeout)


def as_printed(line: str, cwd: Path, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command exactly as DevLoop printed it (`devloop ...`)."""
    argv = shlex.split(line)
    assert argv[0] == "devloop", line
    return devloop(*argv[1:], cwd=cwd, input=input)


def quick_start_spec() -> str:
    """The README quick start's spec.yaml (the `shop` project)."""
    readme = README.read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## Running a real project")]
    found = re.search(r"```yaml\n(.*?)```", quick, re.S)
    assert found is not None
    return found.group(1)


def with_criterion(spec: str, unit: str, criterion: str) -> str:
    """The spec with one more acceptance criterion for unit, after its others."""
    data = yaml.safe_load(spec)
    entry = next(u for u in data["units"] if u["id"] == unit)
    entry["acceptance"].append(criterion)
    return yaml.safe_dump(data, sort_keys=False)


def rows(project: Path) -> dict[str, dict[str, object]]:
    done = devloop("status", str(project), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    return {row["unit_id"]: row for row in json.loads(done.stdout)["units"]}


def folder_files(project: Path) -> dict[str, bytes]:
    """Every file of the project folder but DevLoop's private `.devloop/`."""
    return {str(f.relative_to(project)): f.read_bytes() for f in sorted(project.rglob("*"))
            if f.is_file() and ".devloop" not in f.relative_to(project).parts}


def redis_keys(project: Path) -> dict[str, object]:
    """Every DevLoop key of the folder's embedded Redis with what it holds (by value: a
    restart from the AOF may order a hash's fields otherwise)."""
    with redis_endpoint(project, load_settings()) as endpoint:
        client = connect(endpoint.url)
        try:
            read = {"string": client.get, "hash": client.hgetall, "set": client.smembers,
                    "list": lambda k: client.lrange(k, 0, -1), "stream": client.xrange,
                    "zset": lambda k: client.zrange(k, 0, -1, withscores=True)}
            return {k.decode(): read[client.type(k).decode()](k)
                    for k in sorted(client.scan_iter("devloop:*"))}
        finally:
            client.close()


def agree(project: Path, units: list[str]) -> None:
    """The folder and Redis hold the same files for each unit, and an import finds no edit."""
    with redis_endpoint(project, load_settings()) as endpoint:
        store = RedisStore(connect(endpoint.url))
        try:
            pid = load_project(project).pid
            for unit in units:
                folder = project / "units" / unit
                on_disk = {str(f.relative_to(folder)): f.read_bytes()
                           for f in folder.rglob("*") if f.is_file()}
                assert on_disk == store.unit_files(pid, unit).files, unit
            assert store.import_project(load_project(project)).changed_units == []
        finally:
            store.close()


def test_edited_specs_run_a_scaffolded_unit_again_and_reset_asks_then_starts_units_over(
    tmp_path: Path, python_toolchain_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's sequences on one scaffolded project (one quick start run for both): one
    acceptance criterion added, `devloop new --force`, `devloop run` again: the unit runs again
    on the new spec, its new criterion gets its test, and it passes; `--rerun` passes too.
    Then a criterion the script cannot cover blocks the unit; unblocked with the script
    rewritten, it passes; `devloop reset` asks first, then starts it and its dependent over."""
    monkeypatch.delenv("DEVLOOP_REDIS_URL", raising=False)
    started = time.monotonic()
    spec = tmp_path / "spec.yaml"
    spec.write_text(quick_start_spec())
    shop = tmp_path / "shop"
    assert devloop("new", "shop", "--from", "spec.yaml", cwd=tmp_path).returncode == 0
    first = devloop("run", "shop", "--llm", "stub", "--workers", "1", cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr

    spec.write_text(with_criterion(spec.read_text(), "money", NEW_CRITERION))
    rewritten = devloop("new", "shop", "--from", "spec.yaml", "--force", cwd=tmp_path)
    assert rewritten.returncode == 0, rewritten.stderr
    again = devloop("run", "shop", "--llm", "stub", "--workers", "1", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (f'money: spec.json and SDD section changed, acceptance criteria added: '
            f'"{NEW_CRITERION}"; running it again as attempt 2\n') in again.stdout
    now = rows(shop)
    assert (now["money"]["status"], now["money"]["attempt"]) == ("passed", 2)
    tests = (shop / "units/money/tests/test_money.py").read_text()
    assert "def test_03_add_0_0_returns_0" in tests  # the new criterion's test

    rerun = devloop("run", "shop", "--llm", "stub", "--workers", "1", "--rerun", "money",
                    cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "money: asked for with --rerun; running it again as attempt 3\n" in rerun.stdout
    print(f"edit, new --force, run, --rerun: {time.monotonic() - started:.1f} s")

    # The spec changes again but the script stays the old one: money's tester cannot cover
    # the new criterion, and money is blocked; what to do next names reset too.
    spec.write_text(with_criterion(spec.read_text(), "money", BLOCKING_CRITERION))
    assert devloop("new", "shop", "--from", "spec.yaml", "--force", "--no-script",
                   cwd=tmp_path).returncode == 0
    blocked = devloop("run", "shop", "--llm", "stub", "--workers", "1", cwd=tmp_path)
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert ("  # or start it over (its code, tests and attempts go, the spec stays), then run:\n"
            "  devloop reset shop money\n") in blocked.stdout
    [reset_line] = re.findall(r"^  (devloop reset .*)$", blocked.stdout, re.M)

    # The script rewritten for the new spec, a person unblocks money: it passes.
    assert devloop("new", "shop", "--from", "spec.yaml", "--force", cwd=tmp_path).returncode == 0
    hint = devloop("unblock", "shop", "money", "--hint", "cover the new criterion", cwd=tmp_path)
    assert hint.returncode == 0, hint.stdout + hint.stderr
    unblocked = devloop("run", "shop", "--llm", "stub", "--workers", "1", cwd=tmp_path)
    assert unblocked.returncode == 0, unblocked.stdout + unblocked.stderr
    attempt = rows(shop)["money"]["attempt"]

    # Reset asks first; a no (or no answer) leaves the folder and Redis as they were.
    files, keys = folder_files(shop), redis_keys(shop)
    for answer in ("n\n", ""):
        declined = as_printed(reset_line, tmp_path, input=answer)
        assert declined.returncode == 1, declined.stdout + declined.stderr
        assert declined.stdout.splitlines()[-2:] == [
            "Reset 2 units of p-shop (money, cart)? [y/N] ", "nothing was reset"]
        assert folder_files(shop) == files and redis_keys(shop) == keys

    # The command as printed, answered yes: money and cart (built on it) start over.
    done = as_printed(reset_line, tmp_path, input="y\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(
        f"money: passed (scripted) at attempt {attempt}; starts over: its code, tests, runs, "
        "contract.json, coder.log, sessions and attempts go\n"
        "cart: passed (scripted) at attempt 1; starts over too: it depends on money, and its "
        "code was built and tested against the code money loses\n")
    now = rows(shop)
    assert {u: (r["status"], r["attempt"]) for u, r in now.items()} == {
        "money": ("pending", 0), "cart": ("pending", 0)}
    for unit in ("money", "cart"):
        assert not any((shop / "units" / unit / part).exists() for part in ROLE_PARTS)
        assert (shop / "units" / unit / "spec.json").is_file()
    assert not list((shop / "agent-state").glob("*-money*"))
    assert (shop / "stub.yaml").read_bytes() == files["stub.yaml"]
    assert (shop / "units.json").read_bytes() == files["units.json"]
    events = [json.loads(line) for line in (shop / "timeline.ndjson").read_text().splitlines()]
    assert [e["unit_id"] for e in events if e["kind"] == "unit_reset"] == ["money", "cart"]
    assert len(events) > 2 + len([e for e in events if e["kind"] == "unit_reset"])  # kept
    agree(shop, ["money", "cart"])

    # The run it names, as printed: both are built again from their first attempt.
    [next_run] = re.findall(r"^next: (devloop run \S+ --llm stub) ", done.stdout, re.M)
    second = as_printed(next_run, tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert {u: (r["status"], r["attempt"]) for u, r in rows(shop).items()} == {
        "money": ("passed", 1), "cart": ("passed", 1)}
    assert "def test_03_add_0_0_returns_0" in (shop / "units/money/tests/test_money.py").read_text()

    # A misspelt unit: exit 2 with a did-you-mean, nothing asked.
    typo = devloop("reset", "shop", "mony", cwd=tmp_path, input="y\n")
    assert typo.returncode == 2 and typo.stdout == ""
    assert typo.stderr.splitlines() == ['shop: UNIT: no unit "mony"; did you mean "money"?']


def test_an_unblocked_unit_gets_five_more_attempts_and_a_spec_edit_of_a_blocked_unit_names_reset(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    """The retry budget counts from the person's unblock, through the real fleet; a blocked
    unit whose spec changed is told how to run it again or start it over, and starting it
    over as printed lets it pass on its first attempt."""
    # Failures that change every attempt (41, then 43): only the budget blocks it.
    plans = [UnitPlan("calc", coder=["bad", "bad2"] * 5, attempts=10)]
    p = build(tmp_path / "p", plans)
    (p / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    first = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert first.returncode == 1, first.stdout + first.stderr
    assert "blocked: calc: retry budget of 5 attempts spent: " in first.stdout
    assert f"  devloop reset {p} calc\n" in first.stdout

    # Its spec changes while it is blocked: how to run it again, or start it over.
    sdd = p / "sdd/mvcp/units.html"
    sdd.write_text(sdd.read_text().replace("<li>value() returns 42</li>",
                                           "<li>value() returns the int 42</li>"))
    edited = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert edited.returncode == 1, edited.stdout + edited.stderr
    said = re.search(r"^calc: (?:spec\.json and )?SDD section changed.*$", edited.stdout, re.M)
    assert said is not None, edited.stdout
    assert said.group(0).endswith(f"; to run it again: `devloop run {p} --rerun calc`, or to "
                                  f"start it over on it: `devloop reset {p} calc`")
    [reset_line] = re.findall(r"`(devloop reset [^`]+)`", said.group(0))

    # Unblocked by a person: five more attempts (6-10), not one.
    assert devloop("unblock", str(p), "calc", "--hint", "return 42").returncode == 0
    second = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "blocked: calc: retry budget of 5 attempts spent: " in second.stdout
    assert "(attempts 6, 8, 10)" in second.stdout and "(attempts 7, 9)" in second.stdout
    assert rows(p)["calc"]["attempt"] == 10

    # Started over as printed, on a script whose first attempt is right.
    done = as_printed(reset_line, tmp_path, input="y\n")
    assert done.returncode == 0, done.stdout + done.stderr
    good = [UnitPlan("calc")]
    (p / "stub.yaml").write_text(yaml.safe_dump(script(good)))
    third = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert third.returncode == 0, third.stdout + third.stderr
    assert rows(p)["calc"]["attempt"] == 1


def test_reset_is_refused_while_a_run_is_live_on_the_folder(tmp_path: Path) -> None:
    plans = [UnitPlan("a", coder_latency_ms={1: 8000})]  # the run is busy a while
    project = build(tmp_path / "p", plans)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    run = subprocess.Popen([DEVLOOP, "run", str(project), "--llm", "stub", "--workers", "1"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        lock = project / ".devloop/run.lock"
        deadline = time.monotonic() + 60
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.2)
        refused = devloop("reset", str(project), "--yes", timeout=60)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert refused.stderr.splitlines() == [
            f"{project}: devloop run: a run (pid {run.pid}) is live on this folder; fix: stop "
            f"it first (Ctrl-C in its terminal, or `devloop cancel {project}`), then reset"]
        assert run.wait(timeout=180) == 0  # the run was left alone and finished
    finally:
        kill_tree(run.pid)
    assert rows(project)["a"]["status"] == "passed"
    # Once it has ended, --yes resets without asking (nothing is read from stdin).
    done = devloop("reset", str(project), "--yes", input="", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "? [y/N]" not in done.stdout and "reset: a: pending again" in done.stdout
    assert (rows(project)["a"]["status"], rows(project)["a"]["attempt"]) == ("pending", 0)
