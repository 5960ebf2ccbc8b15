"""The stub's relay mode: each request goes to a file, its answer comes from one.

A person (or a program standing in for one) plays the model: `show.py` reads a request as
a model sees it, `answer.py` wraps content blocks into a Messages-API response, and
`desk.py` is the server's side, which waits for that answer. Playbook:
docs/playing-the-model.md.
"""

from devloop.llm.stub.relay.answer import RelayAnswerInvalid, answer_problems, wrap, write_answer
from devloop.llm.stub.relay.desk import RelayDesk, Unanswered
from devloop.llm.stub.relay.files import RelayDir, RelayEntry
from devloop.llm.stub.relay.show import RequestView, render, view

__all__ = [
    "RelayAnswerInvalid",
    "RelayDesk",
    "RelayDir",
    "RelayEntry",
    "RequestView",
    "Unanswered",
    "answer_problems",
    "render",
    "view",
    "wrap",
    "write_answer",
]
