"""`devloop stub-llm --relay` and `devloop relay show|answer` as a person uses them: every
command they print is copied from the output and run exactly as printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.proctree import kill_tree, run_bounded

BIN = str(Path(sys.executable).parent)
DEVLOOP = str(Path(BIN) / "devloop")
# A client configured only by the environment the printed `export` sets.
CLIENT = """
import anthropic
client = anthropic.Anthropic(max_retries=0)
for session, said in (("coder.c.p.money", "Implement money."), ("tester.c.p.money", "Test it.")):
    got = client.messages.create(model="claude-sonnet-4-6", max_tokens=256, system="You code.",
                                 messages=[{"role": "user", "content": said}],
                                 metadata={"user_id": session})
    print(got.content[0].text, got.stop_reason, flush=True)
"""


def commands(line: str) -> list[str]:
    """The commands a printed line names, in backticks."""
    return re.findall(r"`([^`]+)`", line)


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "COLUMNS": "200"}
    return run_bounded(["bash", "-c", command], timeout=60, cwd=cwd, env=env)


@pytest.mark.timeout(120)
def test_the_commands_the_relay_prints_work_as_printed(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    stub = subprocess.Popen([DEVLOOP, "stub-llm", "--relay", "relay", "--port", "0",
                             "--answer-timeout", "60"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        assert stub.stdout is not None
        url = stub.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        export, wait_next = commands(stub.stdout.readline())
        assert export == f"export ANTHROPIC_BASE_URL={url} ANTHROPIC_API_KEY=relay"
        client = subprocess.Popen(["bash", "-c", f"{export}; exec {sys.executable} -c '{CLIENT}'"],
                                  cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)

        (show,) = commands(stub.stdout.readline())  # request 1: ... read it: `...`
        assert show == "devloop relay show relay 1"
        shown = shell(show, tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert "first request of this session" in shown.stdout
        assert "── system ──\nYou code." in shown.stdout and "Implement money." in shown.stdout
        (answer,) = commands(shown.stdout.splitlines()[-1])
        assert answer == "devloop relay answer relay 1 --file turn.yaml"
        (tmp_path / "turn.yaml").write_text("- text: Hello from the relay.\n")
        answered = shell(answer, tmp_path)
        assert answered.returncode == 0, answered.stderr
        assert answered.stdout.startswith("answered request 1: text; stop_reason end_turn")
        assert client.stdout is not None
        assert client.stdout.readline() == "Hello from the relay. end_turn\n"

        # What to do next, as printed: wait for the next request (the client's second).
        (after,) = commands(answered.stdout.splitlines()[-1])
        assert after == wait_next == "devloop relay show relay --wait 600"
        shown = shell(after, tmp_path)
        assert shown.returncode == 0 and "request 2 · tester.c.p.money" in shown.stdout
        done = shell("devloop relay answer relay --text 'Tested.'", tmp_path)
        assert done.returncode == 0, done.stderr
        assert client.stdout.readline() == "Tested. end_turn\n"
        assert client.wait(timeout=30) == 0
        nothing = shell("devloop relay show relay", tmp_path)
        assert nothing.returncode == 1
        assert "no request waiting in relay (2 so far)" in nothing.stdout
    finally:
        for proc in (client, stub):
            if proc is not None and proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait(timeout=10)


def test_an_answer_names_the_problem_and_the_fix(tmp_path: Path) -> None:
    (tmp_path / "relay").mkdir(mode=0o700)
    (tmp_path / "turn.yaml").write_text("- text: ok\n")
    nothing = shell("devloop relay answer relay --file turn.yaml", tmp_path)
    assert nothing.returncode == 2
    assert "0 requests waiting (none); fix: name the request" in nothing.stderr
    both = shell("devloop stub-llm --port 0", tmp_path)
    assert both.returncode == 2 and "--script/--relay: give exactly one" in both.stderr


@pytest.mark.timeout(120)
def test_a_relay_directory_someone_else_could_reach_is_refused(tmp_path: Path) -> None:
    """The answers are what a run acts on: a link planted where the relay's directory goes,
    or a directory others may enter, is refused, never written into or read from."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "relay").symlink_to(elsewhere)
    served = shell("devloop stub-llm --relay relay --port 0", tmp_path)
    assert served.returncode == 2, served.stdout + served.stderr
    assert "relay: type: is a symbolic link" in served.stderr
    assert list(elsewhere.iterdir()) == []
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    read = shell("devloop relay show shared", tmp_path)
    assert read.returncode == 2 and "has mode 777, so other users may enter it" in read.stderr
