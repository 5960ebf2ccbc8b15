"""A package install that runs out of time is the infrastructure's failure: the session ends
to be run again (the install with it), and a tester's Bash keeps to its 60 s limit."""

from __future__ import annotations

import time

from devloop.agent.bash_tool import is_install
from tests.agent.harness import MakeHarness, with_role
from tests.agent.test_loop import script, text, tool

# Slow the first time only (a cold registry), then quick: what a flaky install looks like.
FLAKY = (
    "test -s code/.warm || { echo 1 > code/.warm; sleep 5; }; "
    "npm install --offline --no-audit left-pad >/dev/null 2>&1; rm -f code/.warm; echo installed"
)


def test_an_install_that_times_out_ends_the_session_and_the_resume_runs_it_again(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(script(tool("Bash", command=FLAKY), text("done")))
    h.ctx = with_role(h, command_timeout_s=1)
    result = h.session().run("go")
    assert (result.status, result.terminal_reason) == ("recovery_required", "infra_flake")
    assert (result.failure_summary or "").startswith("a package install timed out after 1 s")
    # Not the model's failure: no result was recorded for the call, so the resumed session
    # runs it again instead of asking the model for that turn once more.
    h.ctx = with_role(h, command_timeout_s=60)
    result = h.session().run("go")
    assert (result.status, result.turns) == ("completed", 2)
    assert [r.turn for r in h.requests()] == [1, 2]
    [answer] = [
        b for b in h.requests()[-1].body["messages"][-1]["content"] if b["type"] == "tool_result"
    ]
    assert "installed" in answer["content"] and "timed out" not in answer["content"]


def test_a_timeout_of_any_other_command_is_the_model_s_to_handle(make_harness: MakeHarness) -> None:
    h = make_harness(script(tool("Bash", command="sleep 5"), text("done")))
    h.ctx = with_role(h, command_timeout_s=1)
    result = h.session().run("go")
    assert result.status == "completed"


def test_bash_never_runs_longer_than_the_role_s_limit_whatever_the_model_asks(
    make_harness: MakeHarness,
) -> None:
    h = make_harness(script(tool("Bash", command="sleep 20", timeout_s=600), text("done")))
    h.ctx = with_role(h, command_timeout_s=1)
    started = time.monotonic()
    result = h.session().run("go")
    assert result.status == "completed"
    # The limit (1 s) plus generous slack for a loaded machine, far below the 20 s asked.
    assert time.monotonic() - started < 15
    [answer] = [
        b for b in h.requests()[-1].body["messages"][-1]["content"] if b["type"] == "tool_result"
    ]
    assert "(timed out)" in answer["content"]


def test_install_commands_are_recognised() -> None:
    for command in ("npm install", "npm ci", "cd x && npm i express", "pip install -r r.txt",
                    "python -m pip install x", "yarn", "yarn add vue", "pnpm add x",
                    "poetry install", "uv sync"):
        assert is_install(command), command
    for command in ("npm test", "node install.js", "pytest", "echo pip", "yarnish build"):
        assert not is_install(command), command
