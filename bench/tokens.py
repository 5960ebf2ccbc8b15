"""Prompt-cache share of a 30-turn coder session: real SDK client, stub server, real sandbox.

Prints a table and writes bench/out/tokens.json. Target: at least 0.80 of input tokens
served from the cache.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from devloop.agent.checkpoint import StoreCheckpointer
from devloop.agent.flavors import toolset
from devloop.agent.prompts import render
from devloop.agent.spec import SessionSpec
from devloop.agent.stuck import StuckThresholds
from devloop.agent.toolloop import AgentSession
from devloop.agent.tools import ToolContext
from devloop.core.config import load_settings
from devloop.ledgers import BugLedger, Timeline
from devloop.llm.anthropic import AnthropicProvider
from devloop.llm.stub import StubServer
from devloop.project.load import load_project
from devloop.roles.registry import all_tools
from devloop.roles.services import RoleServices
from devloop.roles.workspace import Workspace
from devloop.sandbox import make_sandbox
from devloop.server.redis_server import RedisServer
from devloop.store import RedisStore

ROOT = Path(__file__).resolve().parent.parent
TURNS = 30
OUT = ROOT / "bench" / "out" / "tokens.json"


def scripted_turns() -> dict[int, Any]:
    """29 tool turns that read, write and run, then a final text turn."""
    turns: dict[int, Any] = {}
    for n in range(1, TURNS):
        kind = n % 3
        if kind == 0:
            block = {"name": "Read", "input": {"path": "spec.json"}}
        elif kind == 1:
            body = f"// step {n}\nmodule.exports = {{ step: {n} }};\n" + "// padding\n" * 20
            block = {"name": "Write", "input": {"path": f"code/step{n}.js", "content": body}}
        else:
            block = {"name": "Bash", "input": {"command": f"ls code | wc -l && echo turn {n}"}}
        turns[n] = {"content": [{"text": f"Turn {n}."}, {"tool_use": block}]}
    turns[TURNS] = {"content": [{"text": "Done."}]}
    return turns


def main() -> int:
    settings = load_settings()
    work = Path(tempfile.mkdtemp(prefix="devloop-bench-tokens-"))
    project_dir = work / "todo"
    shutil.copytree(ROOT / "examples" / "todo", project_dir)
    key = "coder.p-todo.todo-be"
    with (
        RedisServer(work / "redis") as server,
        StubServer({"sessions": {key: {"turns": scripted_turns()}}}) as stub,
    ):
        store = RedisStore(server.client())
        project = load_project(project_dir)
        store.import_project(project)
        ws = Workspace(store, "p-todo", "todo-be", "coder", 1, settings=settings)
        root = ws.materialize()
        services = RoleServices(
            pid="p-todo",
            unit_id="todo-be",
            role="coder",
            attempt=1,
            units=project.units,
            bugs=BugLedger(store.sink("p-todo", "bugs")),
            timeline=Timeline(store.sink("p-todo", "timeline")),
            save_state=lambda p, d: store.put_agent_state("p-todo", p, d),
            save_memory=lambda n, t: store.put_memory_note("p-todo", "coder", n, t),
        )
        ctx = ToolContext(
            view=root,
            unit_id="todo-be",
            role="coder",
            write_patterns=ws.patterns,
            sandbox=make_sandbox(settings),
            services={"role": services},
        )
        system = render(
            "coder",
            pid="p-todo",
            unit_id="todo-be",
            kind="be",
            stack="node",
            mode="implement",
            attempt=1,
            write_set=list(ws.patterns),
            upstream=[],
            memory=[],
            contract_hash=project.units.units[0].contract_hash,
            syntax_check="node --check code/server.js",
            acceptance=[],
            sdd_section=store.sdd_document("p-todo", "todo-be"),
            conventions="",
        )
        spec = SessionSpec(
            session_key=key,
            flavor="coder",
            mode="implement",
            attempt=1,
            model=settings.model,
            system=system,
            stuck=StuckThresholds(idle_turns=99, same_call=99, same_error=99),
        )
        provider = AnthropicProvider(api_key="bench", base_url=stub.base_url)
        session = AgentSession(
            spec,
            provider,
            toolset("coder", all_tools()),
            ctx,
            StoreCheckpointer(store, "p-todo", "coder", "todo-be"),
        )
        # The first user turn as the runtime builds it: model-written data fenced, then the task.
        note = {
            "topic": "json bodies",
            "relevance": 0.8,
            "content": "Parse request bodies with express.json() before the routes.",
            "source": "memory note by the coder of unit todo-fe",
        }
        first = render(
            "first_turn",
            memory=[note],
            upstream=[],
            code_exports=[],
            contract="",
            history=[],
            regressions=[],
            reflect_hint="",
            baseline=None,
            task="Implement todo-be.",
        )
        result = session.run(first)
        ws.cleanup()
    shutil.rmtree(work, ignore_errors=True)
    u = result.usage
    share = u.cache_read_input_tokens / u.prompt_tokens if u.prompt_tokens else 0.0
    rows = [
        ("turns", result.turns),
        ("status", result.status),
        ("input tokens (uncached)", u.input_tokens),
        ("cache write tokens", u.cache_creation_input_tokens),
        ("cache read tokens", u.cache_read_input_tokens),
        ("share read from cache", f"{share:.3f}"),
        ("estimated cost (USD)", f"{result.cost_usd:.4f}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    verdict = "met" if share >= 0.80 else "MISSED"
    print(f"target: at least 0.80 of input tokens from the cache: {verdict}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps(
            {
                "turns": result.turns,
                "status": result.status,
                "usage": u.model_dump(),
                "cache_share": share,
                "cost_usd": result.cost_usd,
            },
            indent=2,
        )
        + "\n"
    )
    return 0 if result.status == "completed" and result.turns == TURNS else 1


if __name__ == "__main__":
    sys.exit(main())
