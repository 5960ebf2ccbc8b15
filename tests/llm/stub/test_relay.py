"""The stub's relay mode, driven by the unmodified anthropic client: requests filed, answers
written through the writer and served, the reader showing each session's news once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from devloop.llm.stub import StubServer
from devloop.llm.stub.relay import (
    RelayAnswerInvalid,
    RelayDesk,
    RelayDir,
    render,
    view,
    write_answer,
)
from devloop.llm.stub.relay.answer import read_turn
from devloop.llm.stub.turn import Turn

MODEL = "claude-sonnet-4-6"
TOOLS = [{"name": "Read", "description": "Read a file of the unit.",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                           "required": ["path"]}}]
SYSTEM = "You are the coder. Write the unit's code."

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def relay(tmp_path: Path) -> Iterator[tuple[StubServer, RelayDir]]:
    desk = RelayDesk(tmp_path / "relay", timeout_s=20, poll_s=0.01)
    with StubServer({}, desk=desk) as stub:
        yield stub, desk.files


def _ask(stub: StubServer, messages: list[Any], session: str = "coder.c.p.money",
         **kw: Any) -> Any:
    client = anthropic.Anthropic(api_key="k", base_url=stub.base_url, max_retries=0)
    return client.messages.create(model=MODEL, max_tokens=512, system=SYSTEM, tools=TOOLS,
                                  messages=messages, metadata={"user_id": session}, **kw)


def _answer_when_filed(files: RelayDir, seq: int, turn_yaml: str) -> threading.Thread:
    """Stand in for the person: wait for request `seq`, then answer it through the writer."""
    def play() -> None:
        deadline = time.monotonic() + 15
        while files.entry(seq) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        write_answer(files, seq, read_turn(turn_yaml, "turn.yaml"))
    thread = threading.Thread(target=play, daemon=True)
    thread.start()
    return thread


def _as_param(message: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                             for b in message.content]}


def test_the_client_gets_the_written_blocks_with_ids_stop_reason_and_usage(
    relay: tuple[StubServer, RelayDir],
) -> None:
    stub, files = relay
    player = _answer_when_filed(files, 1, "- text: Reading the spec.\n"
                                          "- tool_use: {name: Read, input: {path: spec.json}}\n")
    first = [{"role": "user", "content": "Implement money."}]
    got = _ask(stub, first)
    player.join()
    assert [b.type for b in got.content] == ["text", "tool_use"]
    assert got.content[1].id.startswith("toolu_") and got.content[1].input == {"path": "spec.json"}
    assert got.stop_reason == "tool_use" and got.usage.output_tokens > 0
    filed = json.loads(files.request_path(1).read_text())
    assert (filed["session_key"], filed["turn"]) == ("coder.c.p.money", 1)
    assert filed["body"]["messages"] == first

    # The second turn, streamed: the end of the session, and the reader shows only news.
    player = _answer_when_filed(files, 2, "content: [{text: Done.}]")
    second = [*first, _as_param(got), {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": got.content[1].id, "content": "{\"id\": 1}"}]}]
    client = anthropic.Anthropic(api_key="k", base_url=stub.base_url, max_retries=0)
    with client.messages.stream(model=MODEL, max_tokens=512, system=SYSTEM, tools=TOOLS,
                                messages=second,
                                metadata={"user_id": "coder.c.p.money"}) as stream:
        done = stream.get_final_message()
    player.join()
    assert [b.type for b in done.content] == ["text"] and done.stop_reason == "end_turn"

    one, two = view(files, 1), view(files, 2)
    assert one.since is None and one.system == SYSTEM and [t["name"] for t in one.tools or []] \
        == ["Read"]
    assert two.since == 1 and two.system is None and two.tools is None and two.note == ""
    assert two.messages == [second[2]] and two.first_message == 2
    text = render(two, files)
    assert "[result of Read spec.json]" in text and SYSTEM not in text
    assert "new since request 1" in text and "answered: " in text


def test_a_new_session_and_a_changed_conversation_are_shown_in_full(
    relay: tuple[StubServer, RelayDir],
) -> None:
    stub, files = relay
    for seq, session, said in [(1, "coder.c.p.money", "one"), (2, "tester.c.p.money", "two"),
                               (3, "coder.c.p.money", "three")]:
        player = _answer_when_filed(files, seq, "- text: ok\n")
        _ask(stub, [{"role": "user", "content": said}], session=session)
        player.join()
    tester, again = view(files, 2), view(files, 3)
    assert tester.since is None and tester.system == SYSTEM  # its own first request
    # Request 3 does not continue request 1's conversation: shown from where it differs.
    assert again.since == 1 and again.first_message == 0 and "differs" in again.note
    assert again.messages[0]["content"] == [{"type": "text", "text": "three"}]


def test_an_unanswered_request_times_out_naming_the_command_and_its_retry_waits_for_it(
    tmp_path: Path,
) -> None:
    desk = RelayDesk(tmp_path / "relay", timeout_s=0.3, poll_s=0.01)
    with StubServer({}, desk=desk) as stub:
        messages = [{"role": "user", "content": "Implement money."}]
        with pytest.raises(anthropic.InternalServerError) as raised:
            _ask(stub, messages)
        assert raised.value.status_code == 504
        said = str(raised.value)
        assert "no answer to request 1" in said and "devloop relay answer" in said
        desk.timeout_s = 20
        player = _answer_when_filed(desk.files, 1, "- text: Late, but here.\n")
        got = _ask(stub, messages)  # the same body: the same request, not a new one
        player.join()
    assert got.content[0].text == "Late, but here."
    assert [e.seq for e in desk.files.entries()] == [1]


def test_a_bad_answer_file_is_moved_aside_with_its_problem_and_the_request_waits_on(
    relay: tuple[StubServer, RelayDir],
) -> None:
    stub, files = relay

    def write_badly_then_well() -> None:
        while files.entry(1) is None:
            time.sleep(0.01)
        bad = {"type": "message", "role": "assistant", "stop_reason": "end_turn",
               "content": [{"type": "tool_use", "id": "toolu_1", "name": "Delete", "input": {}}],
               "usage": {"input_tokens": 1, "output_tokens": 1}}
        files.answer_path(1).write_text(json.dumps(bad))
        while not files.problem_path(1).exists():
            time.sleep(0.01)
        write_answer(files, 1, Turn.model_validate({"content": [{"text": "Fixed."}]}))

    player = threading.Thread(target=write_badly_then_well, daemon=True)
    player.start()
    got = _ask(stub, [{"role": "user", "content": "go"}])
    player.join()
    assert got.content[0].text == "Fixed."
    problem = files.problem_path(1).read_text()
    assert "'Delete' is not a tool this request offers; offered: Read" in problem
    assert "end_turn with tool calls" in problem and files.rejected_path(1).exists()


def test_the_writer_refuses_what_the_api_would_never_send_and_names_the_fix(
    relay: tuple[StubServer, RelayDir],
) -> None:
    stub, files = relay
    asking = threading.Thread(target=_ask, args=(stub, [{"role": "user", "content": "go"}]),
                              daemon=True)
    asking.start()
    while files.entry(1) is None:
        time.sleep(0.01)
    with pytest.raises(RelayAnswerInvalid, match="'Wirte' is not a tool this request offers"):
        write_answer(files, 1, read_turn("- tool_use: {name: Wirte, input: {}}\n", "t.yaml"))
    with pytest.raises(RelayAnswerInvalid, match="a text block needs some text"):
        write_answer(files, 1, read_turn("- text: ' '\n", "t.yaml"))
    with pytest.raises(RelayAnswerInvalid) as raised:
        read_turn("- text: ok\n- tool_use: {name: Read}\n  txt: x\n", "t.yaml")
    assert str(raised.value).startswith("t.yaml:")  # the line of the problem
    with pytest.raises(RelayAnswerInvalid, match="no request 7"):
        write_answer(files, 7, read_turn("- text: ok\n", "t.yaml"))
    write_answer(files, 1, read_turn("- text: ok\n", "t.yaml"))
    with pytest.raises(RelayAnswerInvalid, match="answered already"):
        write_answer(files, 1, read_turn("- text: again\n", "t.yaml"))
    asking.join(timeout=10)
    assert files.waiting() == []
