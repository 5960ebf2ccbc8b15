"""Append-only ledgers: bugs.ndjson, timeline.ndjson and coder.log over a pluggable sink."""

from devloop.ledgers.bugs import BugLedger, BugNotOwned, BugTransitionError
from devloop.ledgers.coderlog import (
    DecisionInvalid,
    append_decision,
    format_decision,
    parse_coder_log,
    read_decisions,
    validate_decision,
)
from devloop.ledgers.sink import AppendSink, DirSink, FileSink
from devloop.ledgers.timeline import Timeline

__all__ = [
    "AppendSink",
    "BugLedger",
    "BugNotOwned",
    "BugTransitionError",
    "DecisionInvalid",
    "DirSink",
    "FileSink",
    "Timeline",
    "append_decision",
    "format_decision",
    "parse_coder_log",
    "read_decisions",
    "validate_decision",
]
