"""The server's side of the relay: file each request, wait for its answer, serve it."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devloop.core.errors import DevLoopError
from devloop.llm.stub.relay.answer import answer_problems
from devloop.llm.stub.relay.files import RelayDir, RelayEntry, write_atomically
from devloop.llm.stub.tokens import canonical
from devloop.safe.private import make_private_dir

DEFAULT_TIMEOUT_S = 300.0  # under the anthropic client's own 600 s read timeout


class Unanswered(DevLoopError):
    """No answer was written in time; the client's retry waits for the same request."""


def _fingerprint(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(body).encode()).hexdigest()


class RelayDesk:
    """Files requests under `root` and waits up to `timeout_s` for each answer.

    A request equal to one filed before (a client's retry after a timeout or a dropped
    connection, or a run resumed from its checkpoint) is the same request: it waits for,
    or is served, the same answer.
    """

    def __init__(
        self,
        root: str | Path,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        announce: Callable[[str], None] | None = None,
        poll_s: float = 0.05,
    ) -> None:
        self.files = RelayDir(root)
        # The answers are what the run acts on and the requests hold the project: a
        # directory another user made first (a shared /tmp) is refused (NotPrivate).
        make_private_dir(self.files.root)
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._announce = announce or (lambda line: None)
        self._lock = threading.Lock()
        entries = self.files.entries()
        self._next = max((e.seq for e in entries), default=0) + 1
        self._filed = {_fingerprint(self.files.request(e.seq)): e.seq for e in entries}

    def answer(self, session_key: str, turn: int, body: dict[str, Any]) -> dict[str, Any]:
        """The answer written for this request (raises Unanswered past the timeout)."""
        mark = _fingerprint(body)
        with self._lock:
            seq = self._filed.get(mark)
            if seq is None:
                seq, self._next = self._next, self._next + 1
                self.files.add_request(RelayEntry(seq, session_key, turn), body)
                self._filed[mark] = seq
                self._announce(f"request {seq}: {session_key} turn {turn}; read it: "
                               f"`devloop relay show {shlex.quote(str(self.files.root))} {seq}`")
        deadline = time.monotonic() + self.timeout_s
        while True:
            message = self._answered(seq, body)
            if message is not None:
                return message
            if time.monotonic() >= deadline:
                raise Unanswered(
                    f"relay: no answer to request {seq} ({session_key} turn {turn}) in "
                    f"{self.timeout_s:g}s; write {self.files.answer_path(seq)} with `devloop "
                    f"relay answer {shlex.quote(str(self.files.root))} {seq} --file TURN.yaml`: "
                    "the client's retry waits for it again")
            time.sleep(self.poll_s)

    def _answered(self, seq: int, body: dict[str, Any]) -> dict[str, Any] | None:
        """The answer file's message when it is one the API could send; a bad one is moved
        aside with its problems, and the request waits on."""
        path = self.files.answer_path(seq)
        try:
            message = self.files.answer(seq)
        except (ValueError, OSError) as exc:
            problems = [f"not a JSON object: {exc}"]
        else:
            if message is None:
                return None
            problems = answer_problems(message, body)
            if not problems:
                return message
        os.replace(path, self.files.rejected_path(seq))
        said = "\n".join(problems)
        write_atomically(self.files.problem_path(seq), said + "\n")
        self._announce(f"request {seq}: answer refused, moved to "
                       f"{self.files.rejected_path(seq)}: {json.dumps(said)}; write it again")
        return None
