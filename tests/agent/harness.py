"""A real session rig for agent tests: Redis store, view, bubblewrap, stub server, SDK client."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devloop.agent.checkpoint import StoreCheckpointer
from devloop.agent.flavors import toolset
from devloop.agent.reassess import make_reassess
from devloop.agent.spec import Budgets, SelfCheck, SessionSpec
from devloop.agent.stuck import StuckThresholds
from devloop.agent.toolloop import AgentSession
from devloop.agent.tools import ProgressEvent, ToolContext
from devloop.core.config import Settings
from devloop.ledgers import BugLedger, Timeline
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles.registry import all_tools
from devloop.roles.services import RoleServices
from devloop.roles.workspace import Workspace
from devloop.sandbox import make_sandbox
from devloop.store import RedisStore

PID, UNIT = "p-todo", "todo-be"
KEY = f"coder.{PID}.{UNIT}"


@dataclass
class Harness:
    """Everything a coder session on todo-be needs, built from real parts."""

    store: RedisStore
    settings: Settings
    base_url: str
    workspace: Workspace
    ctx: ToolContext
    events: list[ProgressEvent] = field(default_factory=list)
    stub: StubServer | None = None

    @property
    def provider(self) -> AnthropicProvider:
        return AnthropicProvider(
            api_key="test-key",
            base_url=self.base_url,
            max_retries=3,
            base_delay_s=0,
            max_delay_s=0,
        )

    def session(
        self,
        *,
        attempt: int = 1,
        mode: str = "implement",
        budgets: Budgets | None = None,
        stuck: StuckThresholds | None = None,
        self_check: SelfCheck | None = None,
        reassess: bool = True,
        system: str = "You are a coder. Be brief.",
        try_no: int = 1,
        context_budget_tokens: int = 150_000,
    ) -> AgentSession:
        spec = SessionSpec(
            session_key=KEY,
            flavor="coder",
            mode=mode,
            attempt=attempt,
            try_no=try_no,
            model="claude-sonnet-4-6",
            system=system,
            max_tokens=1024,
            budgets=budgets or Budgets(),
            stuck=stuck or StuckThresholds(),
            context_budget_tokens=context_budget_tokens,
        )
        tools = all_tools()
        provider = self.provider
        hook = (
            make_reassess(
                spec,
                provider,
                tools,
                self.ctx,
                lambda n: StoreCheckpointer(self.store, PID, f"reassess.{attempt}.{n}", UNIT),
            )
            if reassess
            else None
        )
        return AgentSession(
            spec,
            provider,
            toolset("coder", tools),
            self.ctx,
            StoreCheckpointer(self.store, PID, "coder", UNIT),
            self_check=self_check,
            workspace=self.workspace,
            reassess=hook,
        )

    def requests(self, session_key: str = KEY) -> list[Any]:
        """Requests the stub answered (or faulted) for a session, in order."""
        assert self.stub is not None
        return [r for r in self.stub.requests if r.session_key == session_key]


def build(
    store: RedisStore, settings: Settings, project_dir: Path, script: dict[str, Any]
) -> Harness:
    """Import the project, materialize the coder's view of todo-be, start the stub."""
    store.import_project(load_project(project_dir))
    stub = StubServer(script, record_bodies=True).start()
    harness = rig(store, settings, stub.base_url)
    harness.stub = stub
    return harness


def rig(store: RedisStore, settings: Settings, base_url: str) -> Harness:
    """A coder view of the imported todo-be and its tool context, against base_url."""
    ws = Workspace(store, PID, UNIT, "coder", 1, settings=settings)
    ws.materialize()
    assert ws.root is not None
    events: list[ProgressEvent] = []
    services = RoleServices(
        pid=PID,
        unit_id=UNIT,
        role="coder",
        attempt=1,
        units=store.project_record(PID).units,
        bugs=BugLedger(store.sink(PID, "bugs")),
        timeline=Timeline(store.sink(PID, "timeline")),
        save_state=lambda path, data: store.put_agent_state(PID, path, data),
        save_memory=lambda name, note: store.put_memory_note(PID, "coder", name, note),
        violations=lambda: [str(v) for v in ws.collect().violations],
        owned=ws.owned,
    )
    ctx = ToolContext(
        view=ws.root,
        unit_id=UNIT,
        role="coder",
        write_patterns=ws.patterns,
        sandbox=make_sandbox(settings),
        command_timeout_s=30,
        emit=events.append,
        services={"role": services},
        handle=ws.files,
        owned_files=ws.owned,
    )
    return Harness(store, settings, base_url, ws, ctx, events)


def with_role(h: Harness, **changes: Any) -> ToolContext:
    """A copy of the harness's tool context with fields replaced."""
    return dataclasses.replace(h.ctx, **changes)


MakeHarness = Callable[[dict[str, Any]], Harness]
