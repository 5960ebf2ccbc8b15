"""Every command DevLoop prints for a person to run next works exactly as printed: each is
harvested from a real output and run from the directory the printing command ran in. The
folder remembers how it was run, so a stub run's `devloop run DIR` runs the stub again."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.fleet.builder import UnitPlan, build, script
from tests.proctree import kill_tree
from tests.workers.printed import harvest, run_printed, start_printed
from tests.workers.test_cli_run import devloop

SPEC = """\
company_id: c-acme
project_id: p-shop
stack: python
units:
  - id: money
    kind: lib
    exports:
      module:
        code/money.py:
          "add(a_cents, b_cents)": "-> int"
    acceptance:
      - add(250, 100) returns 350
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Run:
    """One printed command started in the background, its output in a file."""

    def __init__(self, command: str, cwd: Path, name: str) -> None:
        self.out = cwd / f"{name}.out"
        self.proc = start_printed(command, cwd, self.out)

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, what: str, found: object, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        while not found():  # type: ignore[operator]
            assert self.proc.poll() is None, f"the run ended before {what}:\n{self.text()}"
            assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{self.text()}"
            time.sleep(0.2)

    def end(self, timeout_s: float = 180) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout_s} s:\n{self.text()}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            kill_tree(self.proc.pid)
            self.proc.wait(timeout=30)


def one(commands: list[str], prefix: str) -> str:
    """The one harvested command that starts with prefix."""
    [command] = [c for c in commands if c.startswith(prefix)]
    return command


def status_of(cwd: Path, folder: str) -> dict[str, str]:
    shown = devloop("status", folder, "--json", cwd=cwd)
    return {u["unit_id"]: u["status"] for u in json.loads(shown.stdout)["units"]}


@pytest.mark.timeout(300)
def test_a_new_projects_printed_commands_run_as_printed_and_pass(tmp_path: Path) -> None:
    (tmp_path / "spec.yaml").write_text(SPEC)
    made = devloop("new", "shop", "--from", "spec.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    try_it = one(harvest(made.stdout), "devloop run shop")
    ran = run_printed(try_it, tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    report = one(harvest(ran.stdout), "devloop report shop")
    written = run_printed(report, tmp_path)
    assert written.returncode == 0 and (tmp_path / "shop/report.html").is_file(), written.stderr
    # The folder remembers the stub: the plain form the README and the tool print works too.
    again = run_printed("devloop run shop", tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "as this folder's last run: --llm stub" in again.stdout
    assert "resuming: 1 passed, 0 to go" in again.stdout


@pytest.mark.timeout(600)
def test_the_commands_a_run_status_a_refusal_a_cancel_the_console_and_ctrl_c_print_all_work(
    tmp_path: Path,
) -> None:
    # a fails alike three times (blocked), then passes once a person unblocks it; c waits on
    # a; r waits for a person's review.
    plans = [UnitPlan("a", coder=["bad", "bad", "bad", "good"]), UnitPlan("c", ["a"]),
             UnitPlan("r", review="required")]
    build(tmp_path / "p", plans)
    (tmp_path / "p/stub.yaml").write_text(yaml.safe_dump(script(plans)))
    port = free_port()
    runs: list[Run] = []

    def start(command: str) -> Run:
        runs.append(Run(command, tmp_path, f"run{len(runs) + 1}"))
        return runs[-1]

    try:
        first = start(f"devloop run p --llm stub --console --console-port {port}")
        first.wait_for("a person's calls", lambda: "waits for review" in first.text()
                       and "a is blocked" in first.text())
        printed = harvest(first.text())
        unblock = one(printed, "devloop unblock p a --hint")
        review = one(printed, "devloop review p r --approve")

        # While the run is live, status offers no second run: the live one picks it up.
        shown = devloop("status", "p", cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        offered = harvest(shown.stdout)
        assert not [c for c in offered if c.startswith("devloop run")], shown.stdout
        assert "# the live run (pid" in shown.stdout
        # The same command as the run's own line but for the hint's words (run just below).
        assert one(offered, "devloop unblock p a --hint") == (
            'devloop unblock p a --hint "what the coder should know this time"')
        # A second run is refused, and what it offers works.
        refused = devloop("run", "p", cwd=tmp_path, timeout=60)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        watch = one(harvest(refused.stderr), "devloop status p")
        assert run_printed(watch, tmp_path, timeout=60).returncode == 0
        cancel = one(harvest(refused.stderr), "devloop cancel p")

        # The person's hint (as the run printed it) moves a on; c follows it.
        assert "a: re-queued" in run_printed(unblock, tmp_path, timeout=60).stdout
        first.wait_for("a and c to pass", lambda: status_of(tmp_path, "p")["c"] == "passed")
        # A cancel (as the refusal printed it) ends the run with 5; r still waits for review.
        assert run_printed(cancel, tmp_path, timeout=60).returncode == 0
        assert first.end() == 5, first.text()
        resume = one(harvest(first.text()), "devloop resume p")

        # Resumed as printed: the stub and the console come back from the folder's last run.
        second = start(resume)
        second.wait_for("the console", lambda: "Console: http" in second.text())
        [link] = re.findall(r"Console: (http://\S+)", second.text())
        base, _, token = link.partition("/?token=")
        page = _get(f"{base}/p/p-fleet", token)
        console_resume = one(harvest(page), "devloop resume ")
        assert console_resume.endswith(str((tmp_path / "p").resolve()))
        second.wait_for("the resumed run to settle",
                        lambda: "waits for review" in second.text())
        second.proc.send_signal(signal.SIGINT)
        assert second.end(60) == 130, second.text()
        assert "devloop run p" in harvest(second.text())
        again = "devloop run p"

        # Ctrl-C's command, then the console's, each carrying on; the review ends it.
        third = start(again)
        third.wait_for("the run to settle", lambda: "waits for review" in third.text())
        third.proc.send_signal(signal.SIGINT)
        assert third.end(60) == 130, third.text()
        fourth = start(console_resume)
        fourth.wait_for("the run to settle", lambda: "waits for review" in fourth.text())
        approved = run_printed(review, tmp_path, timeout=60)
        assert approved.returncode == 0, approved.stdout + approved.stderr
        assert fourth.end() == 0, fourth.text()
        assert set(status_of(tmp_path, "p").values()) == {"passed"}
    finally:
        for run in runs:
            run.close()


@pytest.mark.timeout(400)
def test_a_budget_pause_prints_a_resume_with_a_real_cap_that_carries_on(tmp_path: Path) -> None:
    plans = [UnitPlan("a"), UnitPlan("b", ["a"])]
    build(tmp_path / "p", plans)
    (tmp_path / "p/stub.yaml").write_text(yaml.safe_dump(script(plans)))
    # One worker (b waits on a); the printed resumes carry it on, as the last run's choice.
    paused = devloop("run", "p", "--llm", "stub", "--max-usd", "0.01", "--workers", "1",
                     cwd=tmp_path)
    assert paused.returncode == 4, paused.stdout + paused.stderr
    for _ in range(6):  # each printed cap at least doubles the spend: a few rounds at most
        resume = one(harvest(paused.stdout), "devloop resume p --max-usd ")
        assert not resume.endswith(" N")
        paused = run_printed(resume, tmp_path)
        if paused.returncode != 4:
            break
    assert paused.returncode == 0, paused.stdout + paused.stderr


def _get(url: str, token: str, timeout_s: float = 60) -> str:
    """The page, once the console answers (its child may still be starting)."""
    request = urllib.request.Request(url, headers={"X-DevLoop-Token": token})
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                return str(response.read().decode())
        except urllib.error.URLError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)

