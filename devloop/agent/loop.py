"""The tool-use loop: query, execute every tool call, append results, checkpoint, repeat.

The session is a small state machine whose whole state is a JSON checkpoint saved
after every step, so a process that dies resumes where it stopped: a model turn that
was answered is never asked again, and tool calls already answered are not re-run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from devloop.agent.context import approx_tokens, clear_old_tool_outputs, for_api
from devloop.agent.result import SessionResult, SessionStatus
from devloop.agent.spec import (
    Checkpointer,
    Reassess,
    SelfCheck,
    SessionSpec,
    WorkspaceHooks,
)
from devloop.agent.stuck import StuckTracker
from devloop.agent.tools import ProgressEvent, ToolContext, Toolset
from devloop.agent.untrusted import sanitize_summary, wrap_untrusted
from devloop.llm.base import LLMError, LLMProvider, LLMRequest, LLMTransient, Usage

# Finished checkpoints a later run of the same (attempt, try) carries on from: the model
# was unavailable, or the session was stopped between turns (cancel, the project's budget).
RESUMABLE = ("recovery_required", "cancelled")


class AgentSession:
    """One role session over a provider, a toolset and a view."""

    def __init__(
        self,
        spec: SessionSpec,
        provider: LLMProvider,
        toolset: Toolset,
        ctx: ToolContext,
        checkpointer: Checkpointer,
        *,
        self_check: SelfCheck | None = None,
        workspace: WorkspaceHooks | None = None,
        reassess: Reassess | None = None,
        cancel: threading.Event | None = None,
    ) -> None:
        self.spec, self.provider, self.toolset, self.ctx = spec, provider, toolset, ctx
        self.checkpointer, self.self_check, self.workspace = checkpointer, self_check, workspace
        self.reassess, self.cancel = reassess, cancel or threading.Event()
        self.state: dict[str, Any] = {}
        self.stuck = StuckTracker(spec.stuck)
        self.started = time.monotonic()

    # --- state -------------------------------------------------------------------

    def _begin(self, task: str) -> SessionResult | None:
        """Load the checkpoint: a finished result, a resumed state, reuse, or a new start.

        A checkpoint is this session's when its (attempt, try) is this spec's. One that
        ended `recovery_required` (the model was unavailable) is resumed, with a real
        model call: only a session that ended for good returns its stored result.
        """
        saved = self.checkpointer.load(self.spec.session_key)
        mine = (self.spec.attempt, self.spec.try_no)
        theirs = identity(saved) if saved else None
        if saved and theirs and theirs > mine:
            # A late redelivery of an attempt the loop has already moved past.
            self.state = {**saved, "attempt": self.spec.attempt, "try": self.spec.try_no}
            return self._result("cancelled", "superseded", "a later attempt already ran")
        if saved and theirs == mine:
            if saved["finished"] and saved["result"]["status"] not in RESUMABLE:
                return SessionResult.model_validate(saved["result"])
            self.state = {**saved, "finished": False, "result": None}
            self.stuck = StuckTracker.from_dict(saved["stuck"], self.spec.stuck)
            if self.workspace is not None and saved.get("workspace"):
                self.workspace.restore(saved["workspace"])
            if saved["finished"] and self.state["messages"][-1]["role"] == "assistant":
                # The context was full after the model's turn: ask it to carry on.
                _append_user_text(self.state["messages"], "Continue from where you stopped.")
                self.state["next"] = "query"
            return None
        messages = list(saved["messages"]) if saved else []
        _append_user_text(messages, task)
        self.state = {
            "session_key": self.spec.session_key,
            "attempt": self.spec.attempt,
            "try": self.spec.try_no,
            "mode": self.spec.mode,
            "messages": messages,
            "next": "query",
            "turns": 0,
            "usage": Usage().model_dump(),
            "cost_usd": 0.0,
            "elapsed_ms": 0,
            "self_checks": 0,
            "reassessed": 0,
            "pinned": [],
            "stuck": {},
            "changed_files": [],
            "last_error": None,
            "finished": False,
            "result": None,
            "workspace": None,
        }
        self._save()
        return None

    def _save(self) -> None:
        now = time.monotonic()
        self.state["elapsed_ms"] += int((now - self.started) * 1000)
        self.started = now
        self.state["stuck"] = self.stuck.to_dict()
        if self.workspace is not None:
            self.state["workspace"] = self.workspace.snapshot()
        self.checkpointer.save(self.spec.session_key, self.state)

    def final_plan(self) -> str:
        """The unsanitized text of the last assistant turn (a reassess session's plan)."""
        return _last_text(self.state.get("messages", []))

    @property
    def usage(self) -> Usage:
        return Usage.model_validate(self.state["usage"])

    # --- the loop ----------------------------------------------------------------

    def run(self, task: str) -> SessionResult:
        """Run (or resume) the session to its end and return the result payload."""
        done = self._begin(task)
        if done is not None:
            return done
        while True:
            step = self.state["next"]
            # Checked once per turn, before the model is asked: the turn before it ran to
            # its end (tool results appended), so the checkpoint resumes cleanly.
            if step == "query" and self.cancel.is_set():
                return self._finish("cancelled", "cancelled", "the session was stopped (a "
                                    "person or the project's budget); its checkpoint resumes it")
            if step == "tools":
                self._run_tools()
                continue
            if step == "check":
                ended = self._check()
                if ended is not None:
                    return ended
                continue
            ended = self._limits() or self._unstick() or self._query()
            if ended is not None:
                return ended

    def _limits(self) -> SessionResult | None:
        """End the session when any budget is spent."""
        b, usage = self.spec.budgets, self.usage
        elapsed_s = (self.state["elapsed_ms"] + (time.monotonic() - self.started) * 1000) / 1000
        spent = [
            ("budget_turns", self.state["turns"] >= b.max_turns, f"{b.max_turns} turns"),
            (
                "budget_tokens",
                usage.prompt_tokens + usage.output_tokens >= b.max_tokens,
                f"{b.max_tokens} tokens",
            ),
            ("budget_usd", self.state["cost_usd"] >= b.max_usd, f"${b.max_usd:.2f}"),
            ("budget_wall_time", elapsed_s >= b.max_wall_s, f"{b.max_wall_s:.0f} s of wall time"),
        ]
        for reason, hit, what in spent:
            if hit:
                return self._finish("budget_exceeded", reason, f"the budget of {what} is spent")
        return None

    def _unstick(self) -> SessionResult | None:
        """When stuck, hand one turn to reassess and pin its plan; stuck twice ends it."""
        why = self.stuck.tripped()
        if why is None:
            return None
        if self.reassess is None or self.state["reassessed"] >= self.spec.reassess_limit:
            return self._finish("stuck", "stuck", f"stuck: {why}")
        changes = self.workspace.describe_changes() if self.workspace else "(unknown)"
        plan = self.reassess(why, self.state["last_error"], changes)
        self.state["reassessed"] += 1
        self.state["pinned"].append(plan)
        # The plan is a model's text: it is pinned as wrapped data in the transcript (text
        # blocks are never cleared), never in the system prompt, which stays the same every
        # turn and so stays cached.
        _append_user_text(
            self.state["messages"],
            "You were judged stuck; a read-only review of your work wrote a new plan. "
            "Weigh its steps within your instructions, and do not repeat what failed.\n"
            + wrap_untrusted("what stuck detection measured (it may quote tool output)", why)
            + "\n"
            + wrap_untrusted("the plan of the read-only review", plan),
        )
        self.stuck.reset()
        self._save()
        return None

    def _system(self) -> str:
        """The system prompt: the spec's, unchanged for the whole session."""
        return self.spec.system

    def _query(self) -> SessionResult | None:
        """Ask the model for its next turn and record it before acting on it."""
        messages = self.state["messages"]
        clear_old_tool_outputs(messages, self.spec.context_budget_tokens)
        request = LLMRequest(
            session_key=self.spec.session_key,
            system=self._system(),
            tools=self.toolset.specs(),
            messages=for_api(messages),
            max_tokens=self.spec.max_tokens,
            model=self.spec.model,
        )
        try:
            response = self.provider.complete(request)
        except LLMTransient as exc:
            return self._finish("recovery_required", "llm_unavailable", str(exc))
        except LLMError as exc:
            return self._finish("failed", "llm_error", str(exc))
        self.state["turns"] += 1
        self.state["usage"] = (self.usage + response.usage).model_dump()
        self.state["cost_usd"] += response.cost_usd
        messages.append({"role": "assistant", "content": response.content})
        reason = response.stop_reason
        has_tools = any(b.get("type") == "tool_use" for b in response.content)
        if has_tools:
            self.state["next"] = "tools"
        elif reason in ("end_turn", "stop_sequence"):
            self.state["next"] = "check"
        elif reason == "max_tokens":
            _append_user_text(
                messages,
                "Your reply hit the output limit. Continue from where "
                "it stopped, in smaller steps.",
            )
        elif reason == "model_context_window_exceeded":
            if not clear_old_tool_outputs(messages, approx_tokens(messages) // 2, keep_recent=2):
                return self._finish("recovery_required", "context_window", "context is full")
        elif reason == "refusal":
            return self._finish("failed", "refusal", "the model refused to continue")
        # pause_turn: the assistant turn goes back as it is, and the model carries on.
        u = self.usage
        self.ctx.emit(
            ProgressEvent(
                "turn", turn=self.state["turns"], tokens=u.prompt_tokens + u.output_tokens
            )
        )
        self._save()
        return None

    def _run_tools(self) -> None:
        """Execute every tool call of the last assistant turn, then checkpoint the results."""
        results = []
        for block in self.state["messages"][-1]["content"]:
            if block.get("type") != "tool_use":
                continue
            name, args = block.get("name", ""), block.get("input")
            result = self.toolset.execute(self.ctx, name, args)
            self.stuck.observe_call(name, args, result.text if result.is_error else None)
            if result.is_error:
                self.state["last_error"] = result.text[:2000]
            for path in result.changed_files:
                if path not in self.state["changed_files"]:
                    self.state["changed_files"].append(path)
            text = (
                wrap_untrusted(f"output of {name}", result.text)
                if result.untrusted
                else (result.text)
            )
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": block["id"],
                    "content": text,
                    "is_error": result.is_error,
                }
            )
            self.ctx.emit(ProgressEvent("tool", detail={"name": name, "error": result.is_error}))
        self.state["messages"].append({"role": "user", "content": results})
        if self.workspace is not None:
            self.stuck.observe_turn(self.workspace.fingerprint())
        self.state["next"] = "query"
        self._save()

    def _check(self) -> SessionResult | None:
        """The model says it is done: run the role's self-check, hand failures back twice."""
        failures = self.self_check() if self.self_check else []
        if not failures:
            return self._finish("completed", "end_turn", None)
        if self.state["self_checks"] >= self.spec.self_check_rounds:
            self.state["self_check_failures"] = failures
            return self._finish("failed", "validation_failed", "; ".join(failures))
        self.state["self_checks"] += 1
        _append_user_text(
            self.state["messages"],
            "The runtime's self-check failed; fix each item, then finish again:\n"
            + "\n".join(f"- {f}" for f in failures),
        )
        self.state["next"] = "query"
        self._save()
        return None

    def _finish(self, status: SessionStatus, reason: str, summary: str | None) -> SessionResult:
        """Build the result payload, checkpoint it as finished, and return it."""
        self._save()
        result = self._result(status, reason, summary)
        self.state.update(finished=True, result=result.model_dump(mode="json"))
        self.checkpointer.save(self.spec.session_key, self.state)
        return result

    def _result(self, status: SessionStatus, reason: str, summary: str | None) -> SessionResult:
        """The payload for the current state."""
        return SessionResult(
            session_key=self.spec.session_key,
            flavor=self.spec.flavor,
            mode=self.spec.mode,
            attempt=self.spec.attempt,
            status=status,
            terminal_reason=reason,
            final_text=sanitize_summary(_last_text(self.state["messages"])),
            failure_summary=sanitize_summary(summary, 2000) if summary else None,
            usage=self.usage,
            cost_usd=round(self.state["cost_usd"], 6),
            turns=self.state["turns"],
            duration_ms=self.state["elapsed_ms"],
            self_check_failures=self.state.get("self_check_failures", []),
            changed_files=self.state["changed_files"],
        )


def identity(checkpoint: dict[str, Any]) -> tuple[int, int]:
    """(attempt, try) of a checkpoint; checkpoints from before tries were one try."""
    return int(checkpoint["attempt"]), int(checkpoint.get("try", 1))


def _append_user_text(messages: list[dict[str, Any]], text: str) -> None:
    """Add a user text block, merging into a trailing user message (turns must alternate)."""
    block = {"type": "text", "text": text}
    if messages and messages[-1]["role"] == "user":
        messages[-1]["content"].append(block)
    else:
        messages.append({"role": "user", "content": [block]})


def _last_text(messages: list[dict[str, Any]]) -> str:
    """The text of the last assistant turn that said anything."""
    for message in reversed(messages):
        if message["role"] == "assistant":
            text = " ".join(
                b.get("text", "") for b in message["content"] if b.get("type") == "text"
            )
            if text.strip():
                return text
    return ""
