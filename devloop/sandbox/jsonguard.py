"""jsonGuard: refuse shell commands that hand inline JSON to an HTTP client.

Models quote JSON inside shell strings badly (an apostrophe, a `!`, a `$` and the body
silently changes), and each sandboxed command starts with a fresh private /tmp. So
the fix is always the same: write the body to a file in the same command and pass the
file (`curl -d @/tmp/body.json`). `check_command` returns that advice, or None.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

CURL = {"curl"}
WGET = {"wget"}
HTTPIE = {"http", "https", "httpie", "xh", "xhs"}
CLIENTS = CURL | WGET | HTTPIE
# curl options whose value is the request body (long options given exactly).
CURL_BODY = {"-d", "--data", "--data-raw", "--data-binary", "--data-ascii", "--json"}
# curl short options that take a value: in a cluster (`-sSd`) the rest is that value.
CURL_SHORT_VALUE = set("AbCcdDEeFHKmoPQrTtUuwXxYyz")
WGET_BODY = {"--post-data", "--body-data"}
HTTPIE_BODY = {"--raw"}
ECHOERS = {"echo", "printf"}
PUNCTUATION = "();<>|&\n"
_HEREDOC = re.compile(r"(?<!<)<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_HTTPIE_RAW_FIELD = re.compile(r"^[^=:@\s]+:=(?!@)(.*)$", re.DOTALL)
_MAX_DEPTH = 3

FIXES = {
    "curl": "curl -H 'Content-Type: application/json' -d @/tmp/body.json URL"
    "   (or: curl --json @/tmp/body.json URL)",
    "wget": "wget --header='Content-Type: application/json' --post-file=/tmp/body.json URL",
    "httpie": "http POST URL < /tmp/body.json",
}


def check_command(command: str) -> str | None:
    """A refusal message when `command` sends inline JSON to curl/wget/httpie, else None."""
    return _check(command, 0)


def _check(command: str, depth: int) -> str | None:
    """Check every simple command, and shell strings nested in them (`sh -c "..."`)."""
    tokens = _tokens(_strip_heredocs(command))
    if tokens is None:
        return None  # unbalanced quotes: the shell will report it, nothing will be sent
    piped_json = False
    for words, separator in _simple_commands(tokens):
        found = _inspect(words, piped_json)
        if found is not None:
            return _message(*found)
        if depth < _MAX_DEPTH:
            for word in words:
                if any(c.isspace() for c in word) and any(n in word for n in CLIENTS):
                    nested = _check(word, depth + 1)
                    if nested is not None:
                        return nested
        piped_json = separator == "|" and _echoes_json(words)
    return None


def _inspect(words: list[str], piped_json: bool) -> tuple[str, str] | None:
    """(client, how) when this simple command sends inline JSON, else None."""
    for i, word in enumerate(words):
        name = word.lstrip("`$(").rsplit("/", 1)[-1]
        if name not in CLIENTS:
            continue
        args = words[i + 1 :]
        if piped_json:
            return name, "JSON piped into it from echo/printf"
        for j, arg in enumerate(args[:-1]):
            if arg == "<<<" and _is_json(args[j + 1]):
                return name, f"a here-string `<<< {_clip(args[j + 1])}`"
        if name in CURL:
            how = _curl_body(args)
        elif name in WGET:
            how = _long_option_body(args, WGET_BODY)
        else:
            how = _long_option_body(args, HTTPIE_BODY) or _httpie_raw_field(args)
        if how is not None:
            return name, how
    return None


def _curl_body(args: list[str]) -> str | None:
    """The offending curl option, if a body option carries inline JSON."""
    j = 0
    while j < len(args):
        arg, following = args[j], args[j + 1] if j + 1 < len(args) else ""
        if arg in CURL_BODY and _is_json(following):
            return f"`{arg} {_clip(following)}`"
        if arg.startswith("--") and "=" in arg:
            option, value = arg.split("=", 1)
            if option in CURL_BODY and _is_json(value):
                return f"`{arg[:60]}`"
        elif arg.startswith("-") and not arg.startswith("--") and len(arg) > 1:
            for k, flag in enumerate(arg[1:], start=2):
                if flag in CURL_SHORT_VALUE:
                    value = arg[k:] or following
                    if flag == "d" and _is_json(value):
                        return f"`-d {_clip(value)}`"
                    j += 0 if arg[k:] else 1
                    break
        j += 1
    return None


def _long_option_body(args: list[str], options: set[str]) -> str | None:
    """The offending `--option VALUE` / `--option=VALUE` carrying inline JSON."""
    for j, arg in enumerate(args):
        option, eq, value = arg.partition("=")
        if not eq:
            value = args[j + 1] if j + 1 < len(args) else ""
        if option in options and _is_json(value):
            return f"`{option} {_clip(value)}`"
    return None


def _httpie_raw_field(args: list[str]) -> str | None:
    """An httpie raw JSON field (`key:='{...}'`) with an object or array value."""
    for arg in args:
        match = _HTTPIE_RAW_FIELD.match(arg)
        if match and _is_json(match.group(1)):
            return f"a raw JSON field `{_clip(arg)}`"
    return None


def _echoes_json(words: list[str]) -> bool:
    """Whether a simple command is `echo`/`printf` of something JSON-shaped."""
    return bool(words) and words[0] in ECHOERS and any(_is_json(w) for w in words[1:])


def _is_json(value: str) -> bool:
    """Inline JSON: an object or array literal (`@file` and `-` are not)."""
    return value.lstrip().startswith(("{", "["))


def _clip(value: str, size: int = 40) -> str:
    """A short quoted excerpt for the message."""
    text = " ".join(value.split())
    return repr(text if len(text) <= size else text[:size] + "...")


def _message(client: str, how: str) -> str:
    """What the model should do instead, concretely."""
    fix = FIXES["httpie" if client in HTTPIE else client]
    return (
        f"jsonGuard refused this command (nothing ran): it sends inline JSON to {client} "
        f"via {how}. Inline JSON in a shell command breaks on quoting. Write the body to a "
        "file and pass the file, in the same command (every command gets a fresh, private "
        "/tmp):\n"
        "  cat > /tmp/body.json <<'EOF'\n"
        '  {"your": "json"}\n'
        "  EOF\n"
        f"  {fix}\n"
        "A body file in a directory you may write (for example a test fixture) works too."
    )


def _strip_heredocs(command: str) -> str:
    """Drop here-document bodies: they are file contents, not shell words."""
    kept: list[str] = []
    pending: list[tuple[str, bool]] = []
    for line in command.split("\n"):
        if pending:
            delimiter, strip_tabs = pending[0]
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                pending.pop(0)
            continue
        kept.append(line)
        pending += [(m.group(3), m.group(1) == "-") for m in _HEREDOC.finditer(line)]
    return "\n".join(kept)


def _tokens(command: str) -> list[str] | None:
    """Shell words and operator tokens (newlines kept as separators), or None."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=PUNCTUATION)
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""  # `#` inside a URL fragment is not a comment
    try:
        return list(lexer)
    except ValueError:
        return None


def _simple_commands(tokens: list[str]) -> Iterator[tuple[list[str], str]]:
    """Split tokens into simple commands, each with the separator that ended it."""
    words: list[str] = []
    for token in tokens:
        if token and set(token) <= set(PUNCTUATION) and _is_separator(token):
            yield words, "|" if "|" in token and "||" not in token else token
            words = []
        else:
            words.append(token)
    yield words, ""


def _is_separator(token: str) -> bool:
    """`;`, `&&`, `||`, `|`, `&`, parentheses and newlines end a command; redirections do not."""
    if any(c in token for c in ";|()\n"):
        return True
    return "&" in token and not token.startswith(("<", ">"))
