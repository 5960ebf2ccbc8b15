"""The Messages-API stub server: scripted turns, injected faults, prompt-cache accounting."""

from devloop.llm.stub.app import RecordedRequest, StubApp
from devloop.llm.stub.script import Fault, Script, Session, Turn
from devloop.llm.stub.server import StubServer, serve_forever
from devloop.llm.stub.yamlmarks import ScriptInvalid

__all__ = [
    "Fault",
    "RecordedRequest",
    "Script",
    "ScriptInvalid",
    "Session",
    "StubApp",
    "StubServer",
    "Turn",
    "serve_forever",
]
