"""jsonGuard refuses inline JSON bodies for HTTP clients and lets everything else through."""

from __future__ import annotations

import pytest

from devloop.sandbox.jsonguard import check_command

REFUSED = [
    """curl -d '{"title": "x"}' http://127.0.0.1:3000/todos""",
    """curl -X POST -H 'Content-Type: application/json' --data '{"a": 1}' http://x""",
    """curl --data-raw '[1, 2]' http://x""",
    """curl --data-binary '{"a": 1}' http://x""",
    """curl --data-ascii '{"a": 1}' http://x""",
    """curl --json '{"a": 1}' http://x""",
    """curl -sSd '{"a": 1}' http://x""",
    """curl -d'{"a": 1}' http://x""",
    """curl -d "{\\"a\\": 1}" http://x""",
    """/usr/bin/curl -d ' {"a": 1}' http://x""",
    """wget --post-data='{"a": 1}' http://x""",
    """wget --body-data '{"a": 1}' --method=PUT http://x""",
    """http POST http://x <<< '{"a": 1}'""",
    """curl -d @- http://x <<< '{"a": 1}'""",
    """http POST http://x tags:='["a", "b"]'""",
    """xh POST http://x meta:='{"k": 1}'""",
    """echo '{"a": 1}' | curl -d @- http://x""",
    """printf '%s' '[1]' | http POST http://x""",
    """cd app && node server.js & sleep 1; curl -d '{"a": 1}' localhost:3000""",
    """npm start >/dev/null 2>&1 &\ncurl -d '{"a": 1}' localhost:3000""",
    """sh -c "curl -d '{\\"a\\": 1}' http://x" """,
    """bash -lc 'curl --json "[1]" http://x'""",
    """out=$(curl -s -d '{"a": 1}' http://x) && echo $out""",
    """timeout 5 env A=1 curl -d '{"a": 1}' http://x""",
]

ALLOWED = [
    """curl -d @/tmp/body.json http://x""",
    """curl --json @body.json http://x""",
    """curl --data-binary @- http://x < /tmp/body.json""",
    """curl -d 'a=1&b=2' http://x""",
    """curl -H '{"not": "a body"}' http://x""",
    """curl -s http://localhost:3000/todos | python3 -m json.tool""",
    """wget --post-file=/tmp/body.json http://x""",
    """http POST http://x name=joe age:=3 done:=true""",
    """http POST http://x tags:=@tags.json""",
    """http POST http://x < /tmp/body.json""",
    """cat > /tmp/body.json <<'EOF'\n{"a": "it's"}\nEOF\ncurl -d @/tmp/body.json http://x""",
    """cat > /tmp/b.json <<-EOF\n\t[1, 2]\n\tEOF\nhttp POST http://x < /tmp/b.json""",
    """echo '{"a": 1}' > body.json && curl -d @body.json http://x""",
    """node -e 'console.log(JSON.stringify({a: 1}))'""",
    """npx vitest run --reporter=json --outputFile=runs/run-1/result.json 2>&1 | tail -5""",
    """grep -rn '{' code/ | head""",
    """echo 'unbalanced""",
    "",
]


@pytest.mark.parametrize("command", REFUSED)
def test_inline_json_for_an_http_client_is_refused(command: str) -> None:
    message = check_command(command)
    assert message is not None
    assert "nothing ran" in message and "/tmp/body.json" in message


@pytest.mark.parametrize("command", ALLOWED)
def test_bodies_from_files_and_other_commands_are_allowed(command: str) -> None:
    assert check_command(command) is None


@pytest.mark.parametrize(
    ("command", "fix"),
    [
        ("""curl -d '{"a": 1}' http://x""", "-d @/tmp/body.json"),
        ("""wget --post-data='{"a": 1}' http://x""", "--post-file=/tmp/body.json"),
        ("""http POST http://x a:='[1]'""", "http POST URL < /tmp/body.json"),
    ],
)
def test_the_message_names_the_option_and_the_clients_own_fix(command: str, fix: str) -> None:
    message = check_command(command)
    assert message is not None and fix in message
    assert "cat > /tmp/body.json <<'EOF'" in message
    assert "same command" in message  # each sandboxed command has its own /tmp


def test_the_message_quotes_the_offending_option() -> None:
    message = check_command("""curl -s --data-raw '{"title": "buy milk"}' http://x""")
    assert message is not None and """`--data-raw '{"title": "buy milk"}'`""" in message
