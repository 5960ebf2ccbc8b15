"""The end of `devloop run` and `devloop status`: every blocked unit with its reason and the
commands that move it on; `devloop unblock` says whether anything will run the unit."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from markupsafe import escape

from devloop.core.contracts import hash_contract
from devloop.ledgers import parse_coder_log
from devloop.roles.coder_tools import NOT_GIVEN
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import CONTRACT, UnitPlan, build, script
from tests.fleet.fleet import fleet
from tests.proctree import run_bounded

DEVLOOP = str(Path(sys.executable).parent / "devloop")
SAME = "the same failure 3 times"
HASH = hash_contract(CONTRACT)
FAILED_TEST = "tests/test_unit.py::test_value_returns_42 got 41"
BRIDGE = (f"contract_bridge: contract.version self-inconsistent (expected {HASH}, actual "
          f'{HASH}); set "version" to the hash_contract result "{HASH}"; never compute it by '
          "hand")
UNBRIDGED = f"validation failed: the coder's self-check found {BRIDGE}"

# The runs here take one worker: their units wait on each other (docs/codebase.md, the
# suite's time). The default of two is run by the demo, supervision, chaos and console tests.
pytestmark = pytest.mark.timeout(900)


def devloop(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    return run_bounded([DEVLOOP, *args], env={**env, "COLUMNS": "200"}, timeout=timeout)


def rows(project: Path) -> dict[str, dict[str, object]]:
    done = devloop("status", str(project), "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    return {row["unit_id"]: row for row in json.loads(done.stdout)["units"]}


def test_blocked_units_get_their_reason_and_next_commands_and_unblock_says_who_runs_them(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    # Scripted past an unblock: the budget and the same-failure count start again there.
    plans = [UnitPlan("bad", bad=True, attempts=10), UnitPlan("after", ["bad"]),
             UnitPlan("unbridged", coder=["unbridged"], attempts=10), UnitPlan("good")]
    p = build(tmp_path / "p", plans)
    (p / "stub.yaml").write_text(yaml.safe_dump(script(plans)))

    first = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert first.returncode == 1, first.stdout + first.stderr
    out = first.stdout
    # Where the files are, how to see the report, and that the costs were scripted.
    assert f"files:  {p} (units/*/code, units/*/tests, units/*/runs," in out
    assert f"report: devloop report {p} -o {p}/report.html" in out
    assert "scripted (the stub's turns priced as Claude; nothing was spent)" in out
    # Each blocked unit: which failure, and the exact commands to go on.
    assert f"blocked: bad: {SAME}: {FAILED_TEST} (attempts 1-3)\n" in out
    assert (f'  devloop unblock {p} bad --hint "what the coder should know this time"\n'
            f"  devloop run {p}\n"
            "  # or start it over (its code, tests and attempts go, the spec stays), then run:\n"
            f"  devloop reset {p} bad\n") in out
    assert f"blocked: unbridged: {SAME}: {UNBRIDGED} (attempts 1-3)\n" in out
    assert "waiting on a blocked unit: after (waits for bad, which is blocked)" in out

    # status carries the reason, the last error and the next commands, as JSON and as a table.
    now = rows(p)
    assert now["bad"]["reason"] == f"{SAME}: {FAILED_TEST} (attempts 1-3)"
    assert "last_error" in now["bad"] and now["bad"]["blocked_reason"] == SAME
    assert now["bad"]["next_steps"] == [
        f'devloop unblock {p} bad --hint "what the coder should know this time"',
        f"devloop run {p}",
        "# or start it over (its code, tests and attempts go, the spec stays), then run:",
        f"devloop reset {p} bad",
    ]
    assert now["good"]["reason"] is None and now["good"]["next_steps"] == []
    table = devloop("status", str(p), timeout=120)
    assert f"{SAME}: {FAILED_TEST} (attempts 1-3)" in table.stdout.replace("\n", "")
    assert (f"blocked: bad: {SAME}: {FAILED_TEST} (attempts 1-3)\n"
            f'  devloop unblock {p} bad --hint "what the coder should know this time"\n'
            f"  devloop run {p}\n") in table.stdout

    # The report says, attempt by attempt, what failed the coder's validation.
    report = devloop("report", str(p), "-o", str(tmp_path / "r.html"), timeout=120)
    assert report.returncode == 0, report.stderr
    html = (tmp_path / "r.html").read_text()
    assert html.count(f"<li>{escape(BRIDGE.split('; ')[0])}</li>") == 3
    assert "cost (scripted)" in html and "data-scripted" in html

    # unblock: a misspelt unit; then a real one, and nothing consumes the queues.
    typo = devloop("unblock", str(p), "badd", "--hint", "x", timeout=120)
    assert typo.returncode == 2
    assert typo.stderr.splitlines() == [f'{p}: UNIT: no unit "badd"; did you mean "bad"?']
    again = devloop("unblock", str(p), "bad", "--hint", "value() must return 42", timeout=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "bad: re-queued as attempt 4 with your hint",
        "no worker consumes this project's queues, so nothing runs it yet: "
        f"`devloop run {p}` picks it up (or unblock with --run)",
    ]
    waiting = rows(p)["bad"]
    assert waiting["status"] == "interrupted" and waiting["attempt"] == 4
    assert waiting["reason"] == "interrupted: no worker runs it (the run that drove it stopped)"

    # The next run picks it up, says it resumes, and ends on the same failure 3 times again,
    # counted from the person's unblock (attempt 4), as the chain that led there is told.
    second = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert second.returncode == 1, second.stdout + second.stderr
    assert "resuming: 1 passed, 3 to go" in second.stdout
    assert f"blocked: bad: {SAME}: {FAILED_TEST} (attempts 4-6)\n" in second.stdout

    # --run: unblock and run in one go.
    both = devloop("unblock", str(p), "unbridged", "--hint", "hash it", "--run", "--llm", "stub")
    assert both.returncode == 1, both.stdout + both.stderr
    assert both.stdout.startswith(f"unbridged: re-queued as attempt 4 with your hint\n"
                                  f"running: devloop run {p}\n")
    assert f"blocked: unbridged: {SAME}: {UNBRIDGED} (attempts 4-6)" in both.stdout


def test_a_unit_blocked_after_a_real_failure_then_another_names_the_first_cause(
    tmp_path: Path, python_toolchain_dir: Path
) -> None:
    # Attempt 1's code is wrong (its test fails); attempts 2-4 write a contract.json whose
    # version is not its hash. Beside it a unit whose coder only forgets coder.log passes
    # at attempt 1: bookkeeping alone never fails an attempt, let alone blocks a unit.
    plans = [UnitPlan("notes", coder=["bad", "unbridged"]), UnitPlan("good"),
             UnitPlan("forgetful", coder=["unlogged"])]
    p = build(tmp_path / "p", plans)
    (p / "stub.yaml").write_text(yaml.safe_dump(script(plans)))
    story = f"{SAME}: {FAILED_TEST} (attempt 1); then: {UNBRIDGED} (attempts 2-4)"

    first = devloop("run", str(p), "--llm", "stub", "--workers", "1")
    assert first.returncode == 1, first.stdout + first.stderr
    forgetful = rows(p)["forgetful"]
    assert (forgetful["status"], forgetful["attempt"]) == ("passed", 1), forgetful
    [entry] = parse_coder_log((p / "units/forgetful/coder.log").read_text(), strict=True)
    assert entry.attempt == 1 and entry.this_fix == NOT_GIVEN
    assert entry.changed_files == ["code/unit.py", "contract.json"]
    # The end of the run, `status --json` and the report: the first cause first, whole.
    assert f"blocked: notes: {story}\n" in first.stdout
    assert rows(p)["notes"]["reason"] == story
    report = devloop("report", str(p), "-o", str(tmp_path / "r.html"), timeout=120)
    assert report.returncode == 0, report.stderr
    assert f'<div class="blocked-why">Blocked: {escape(story)}</div>' in (
        tmp_path / "r.html").read_text()

    # At 80 columns the table cuts it at a word, within a few lines, and says where it is
    # whole; that command works as printed.
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    narrow = run_bounded([DEVLOOP, "status", "p"], env={**clean, "COLUMNS": "80"},
                         timeout=120, cwd=tmp_path)
    assert narrow.returncode == 0, narrow.stderr
    table = [line for line in narrow.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and all(len(line) <= 80 for line in table), narrow.stdout
    cell = [line.split("│")[-2].strip() for line in
            itertools.takewhile(lambda line: not line.startswith("│ good"),
                                itertools.dropwhile(lambda line: not line.startswith("│ notes"),
                                                    table))]
    assert 1 < len(cell) <= 4 and cell[-1].endswith("…"), narrow.stdout
    assert "".join(f"{SAME}: {FAILED_TEST}".split()) in "".join("".join(cell).split())
    printed = re.search(r"^… cut to fit; every reason in full:\n  (devloop status .*)$",
                        narrow.stdout, re.M)
    assert printed is not None and printed[1] == "devloop status p --json", narrow.stdout
    whole = run_bounded([DEVLOOP, *shlex.split(printed[1])[1:]], env=clean, timeout=120,
                        cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    assert {r["unit_id"]: r for r in json.loads(whole.stdout)["units"]}["notes"]["reason"] \
        == story
    # Below the table, `devloop status` says it whole too.
    assert f"blocked: notes: {story}\n" in narrow.stdout


def test_unblock_and_status_see_the_workers_that_consume_the_queues(
    redis_store: RedisStore, redis_server: RedisServer, tmp_path: Path,
    python_toolchain_dir: Path,
) -> None:
    plans = [UnitPlan("bad", bad=True)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEVLOOP_REDIS", "ANTHROPIC_"))}
    env.update(DEVLOOP_REDIS_URL=redis_server.celery_url, COLUMNS="200")
    with fleet(redis_store, redis_server.celery_url, build(tmp_path / "p", plans),
               script(plans), workers=1) as f:
        assert f.wait().count("blocked") == 1
        done = run_bounded([DEVLOOP, "unblock", "p-fleet", "bad", "--hint", "return 42"],
                           env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "bad: re-queued as attempt 4 with your hint"
        assert re.fullmatch(r"1 worker\(s\) consume this project's queues \(t0@\S+\): it "
                            r"starts when one is free", lines[1]), lines
        status = run_bounded([DEVLOOP, "status", "p-fleet", "--json"], env=env, timeout=120)
        row = json.loads(status.stdout)["units"][0]
        assert row["status"] in ("coding", "testing", "blocked"), row  # workers run it
    # The fleet is gone: what it left mid-flight has no worker any more.
    redis_store.put_state("p-fleet", "bad", redis_store.get_state("p-fleet", "bad").model_copy(
        update={"status": "coding"}))
    redis_store.drop_leases("p-fleet")
    status = run_bounded([DEVLOOP, "status", "p-fleet", "--json"], env=env, timeout=120)
    assert json.loads(status.stdout)["units"][0]["status"] == "interrupted"
