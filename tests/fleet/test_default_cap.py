"""DevLoop's default spend cap, through `devloop run` as a user starts it with no cap: calls
to a real model that reach it pause the run (exit 4), which says it was the default, what
was spent and the commands that carry on, and each of them, run as printed, does; the turns
a `--llm stub` run prices as Claude never reach it."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from devloop.core.config import DEFAULT_PROJECT_MAX_USD
from devloop.fleet.control import read_control
from devloop.llm.stub import StubServer
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore
from tests.fleet.builder import UnitPlan, build, script
from tests.workers.runproc import SLACK_S, RunProcess, clean_env

PID = "p-fleet"
PLANS = [UnitPlan("a")]  # one unit: its runs take one worker
# A price that makes the first call (a ~3,500-token prompt) cost about $35: past the default.
PRICEY = json.dumps({"claude-sonnet-4-6": {"input": 10000, "output": 10000,
                                           "cache_write": 10000, "cache_read": 10000}})
BIN = str(Path(sys.executable).parent)  # where `devloop` is, as a user's PATH has it


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


def default_pause_commands(output: str) -> list[str]:
    """The commands in the line that says the default cap paused the run."""
    said = "paused: budget: DevLoop's default cap on calls to a real model"
    line = next((ln for ln in output.splitlines() if ln.startswith(said)), None)
    assert line is not None, output
    return re.findall(r"`([^`]+)`", line)


@pytest.mark.timeout(420)
@pytest.mark.parametrize("form", ["resume --max-usd", "export"])
def test_a_real_run_given_no_cap_pauses_at_the_default_and_the_printed_commands_carry_it_on(
    tmp_path: Path, redis_server: RedisServer, form: str
) -> None:
    project = build(tmp_path / "p", PLANS)
    store = RedisStore(redis_server.client())
    with StubServer(script(PLANS)) as stub:  # standing in for Claude: `--llm anthropic`
        env = clean_env(DEVLOOP_REDIS_URL=redis_server.url, ANTHROPIC_BASE_URL=stub.base_url,
                        ANTHROPIC_API_KEY="test", PATH=f"{BIN}:{os.environ['PATH']}")
        run = RunProcess(project, workers=1, env={**env, "DEVLOOP_PRICES_JSON": PRICEY},
                         llm="anthropic")
        try:
            assert run.start().wait(120 + SLACK_S) == 4, run.output()
            control = read_control(store, PID)
            spent = control.real_spent_usd
            assert control.paused == "budget" and control.default_cap_reached
            assert spent >= DEFAULT_PROJECT_MAX_USD and control.max_usd is None
            # The first call crossed the default: no other call was made.
            assert [(r.session_key, r.turn) for r in stub.requests if r.status == 200] == [
                (f"coder.c-test.{PID}.a", 1)]
            more = math.ceil(spent + DEFAULT_PROJECT_MAX_USD)
            commands = default_pause_commands(run.output())
            assert commands == [f"devloop resume {project} --max-usd {more}",
                                f"export DEVLOOP_PROJECT_MAX_USD={more}",
                                f"devloop resume {project}"]
            assert f"was reached (spent ${spent:.4f} of $25.0000, $" in run.output()

            # Each way on, exactly as printed (at the usual price now: more such calls
            # would reach the new cap too).
            shell = commands[0] if form == "resume --max-usd" else "\n".join(commands[1:])
            done = subprocess.run(["bash", "-c", shell], env=env, cwd=tmp_path,
                                  capture_output=True, text=True, timeout=240 + SLACK_S)
            assert done.returncode == 0, done.stdout + done.stderr
        finally:
            run.close()
    control = read_control(store, PID)
    assert (control.paused, control.max_usd, control.default_max_usd) == (None, more, None)
    assert store.get_state(PID, "a").status == "passed"


@pytest.mark.timeout(300)
def test_a_scripted_run_priced_far_past_the_default_is_not_paused_by_it(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    project = build(tmp_path / "p", PLANS)
    (project / "stub.yaml").write_text(yaml.safe_dump(script(PLANS)))
    store = RedisStore(redis_server.client())
    # Each session's own cap ($10) counts scripted turns as a person's cap does: raised.
    run = RunProcess(project, workers=1, env=clean_env(DEVLOOP_REDIS_URL=redis_server.url,
                                                       DEVLOOP_PRICES_JSON=PRICEY,
                                                       DEVLOOP_SESSION_MAX_USD="100000"))
    try:
        assert run.start().wait(120 + SLACK_S) == 0, run.output()
    finally:
        run.close()
    control = read_control(store, PID)
    assert control.spent_usd > 4 * DEFAULT_PROJECT_MAX_USD  # priced as Claude at that price
    assert control.real_spent_usd == 0 and control.paused is None
    assert control.default_max_usd == DEFAULT_PROJECT_MAX_USD  # it stands, and is not reached
    assert "paused" not in run.output()
