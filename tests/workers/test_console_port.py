"""`devloop run --console` never prints a link to someone else's server: it binds the console's
port itself before printing the link, moves off a default port another program holds (and
says so), refuses a `--console-port` that is taken, and hands the bound socket to its console
child, so a restarted console serves the same link."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.console.squatter import Squatter, get, opener
from tests.fleet.builder import UnitPlan, build, script
from tests.workers.runproc import SLACK_S, RunProcess, clean_env
from tests.workers.test_cli_run import devloop

PID = "p-fleet"
STUCK = [UnitPlan("stuck", bad=True)]  # blocks; with the console open the run waits


@pytest.fixture
def squatter(tmp_path: Path) -> Iterator[Squatter]:
    with Squatter(tmp_path / "squatter.log") as held:
        yield held


@pytest.fixture
def project(tmp_path: Path) -> Path:
    made = build(tmp_path / "p", STUCK, pid=PID)
    (made / "stub.yaml").write_text(yaml.safe_dump(script(STUCK)))
    return made


@pytest.mark.timeout(300)
def test_a_taken_console_port_is_reported_and_the_link_is_to_a_port_the_run_holds(
    project: Path, squatter: Squatter
) -> None:
    run = RunProcess(project, env=clean_env(DEVLOOP_CONSOLE_PORT=str(squatter.port)),
                     args=["--console"])
    try:
        run.start()
        found: list[tuple[str, str]] = []

        def printed() -> bool:
            found[:] = re.findall(r"Console: http://127\.0\.0\.1:(\d+)/\?token=(\S+)",
                                  run.output())
            return bool(found)

        run.wait_for("the console's link", printed, 60 + SLACK_S)
        [(port, token)] = found
        assert int(port) != squatter.port
        assert (f"console: port {squatter.port} on 127.0.0.1 is taken by another program; "
                f"the console listens on port {port} instead") in run.output()
        link = f"http://127.0.0.1:{port}/?token={token}"
        client = opener()
        assert f"{PID} · DevLoop console" in get(client, link, timeout_s=60)

        # The console child dies: the port stays the run's (connections wait in its queue)
        # and the restarted child serves the same link (its pages' keys are new: auth.py).
        [child] = [p for p in run.children() if " console " in p.cmdline]
        os.kill(child.pid, signal.SIGKILL)
        page = get(client, link, timeout_s=60)
        assert f"{PID} · DevLoop console" in page
        [again] = [p for p in run.children() if " console " in p.cmdline]
        assert again.pid != child.pid

        assert not any(token in line for line in squatter.requests())
        run.signal(signal.SIGINT)
        assert run.wait(60 + SLACK_S) == 130, run.output()
    finally:
        run.close()
    assert not any(token in line for line in squatter.requests())


@pytest.mark.timeout(120)
def test_a_taken_console_port_named_on_the_command_line_is_refused_before_anything_starts(
    project: Path, squatter: Squatter
) -> None:
    refused = devloop("run", str(project), "--llm", "stub", "--console", "--console-port",
                      str(squatter.port), timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.splitlines() == [
        f"devloop run: --console-port: port {squatter.port} on 127.0.0.1 is taken by another "
        "program; fix: pass another --console-port N, or leave --console-port out to let "
        "DevLoop choose a free port"]
    assert "Console:" not in refused.stdout and "worker(s)..." not in refused.stdout
