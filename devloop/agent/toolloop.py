"""The tool-use loop: query, execute every tool call, append results, checkpoint, repeat.

The session is a small state machine whose whole state is a JSON checkpoint saved
after every step, so a process that dies resumes where it stopped: a model turn that
was answered is never asked again, and tool calls already answered are not re-run.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from devloop.agent import regions
from devloop.agent.checkpoint import SessionState
from devloop.agent.context import (
    approx_tokens,
    clear_old_tool_outputs,
    compact,
    fit,
    for_api,
)
from devloop.agent.result import SessionResult, SessionStatus
from devloop.agent.spec import (
    Checkpointer,
    CheckReport,
    Reassess,
    SelfCheck,
    SessionSpec,
    WorkspaceHooks,
)
from devloop.agent.stuck import StuckTracker, TestTally
from devloop.agent.tools import ProgressEvent, ToolContext, Toolset
from devloop.agent.transcript import (
    append_block,
    append_user_text,
    close_dangling,
    last_text,
)
from devloop.agent.untrusted import sanitize_summary, wrap_untrusted
from devloop.llm.base import (
    LLMAuthError,
    LLMBadRequest,
    LLMError,
    LLMProvider,
    LLMRequest,
    LLMTransient,
    LLMUnpriced,
    Usage,
)

# A session ended because the model API refuses DevLoop itself (the key, its permissions,
# the account, a model id it does not know): the run stops for a person to fix it.
REFUSED = "llm_refused"
# The API refused one request as invalid (400/413/422): not the code's failure and not the
# model's either; the step is retried like one that raised, then the unit is blocked as
# infrastructure with the API's message (no attempt spent, nothing offered as a hint).
INVALID = "llm_invalid_request"

# Finished checkpoints a later run of the same (attempt, try) carries on from: the model
# was unavailable, or the session was stopped between turns (cancel, the project's budget).
RESUMABLE = ("recovery_required", "cancelled")
# The one reminder of what only the model can give (the facts the runtime records itself).
REMINDER = (
    "Before the session ends: the runtime records the facts itself (test runs and their "
    "verdicts, commits, todo items whose output exists), but this only you can give, and "
    "it is asked for once:"
)


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
        baseline: TestTally | None = None,
    ) -> None:
        self.spec, self.provider, self.toolset, self.ctx = spec, provider, toolset, ctx
        self.checkpointer, self.self_check, self.workspace = checkpointer, self_check, workspace
        self.reassess, self.cancel = reassess, cancel or threading.Event()
        # The tests' outcome before the first edit (a coder retry's BASELINE): progress and
        # the best state are measured from it.
        self.baseline = baseline
        self.state = SessionState()
        self.stuck = StuckTracker(spec.stuck)
        self.started = time.monotonic()

    # --- state -------------------------------------------------------------------

    def _begin(self, task: str) -> SessionResult | None:
        """Load the checkpoint: a finished result, a resumed state, reuse, or a new start.

        A checkpoint is this session's when its (attempt, try) is this spec's. One that
        ended `recovery_required` (the model was unavailable) is resumed, with a real
        model call: only a session that ended for good returns its stored result.
        """
        raw = self.checkpointer.load(self.spec.session_key)
        saved = SessionState.model_validate(raw) if raw else None
        mine = (self.spec.attempt, self.spec.try_no)
        theirs = saved.identity if saved else None
        if saved and theirs and theirs > mine:
            # A late redelivery of an attempt the loop has already moved past.
            self.state = saved.model_copy(
                update={"attempt": self.spec.attempt, "try_no": self.spec.try_no}
            )
            return self._result("cancelled", "superseded", "a later attempt already ran")
        if saved and theirs == mine:
            # The view is this run's, fresh from the store: the session's changes go back
            # into it, a finished session's too (its process may have died before the
            # commit, which commits what the view holds).
            if self.workspace is not None and saved.workspace:
                self.workspace.restore(saved.workspace)
            ended = saved.result
            if saved.finished and ended and ended["status"] not in RESUMABLE:
                self.state = saved
                return SessionResult.model_validate(ended)
            self.state = saved.model_copy(update={"finished": False, "result": None})
            self.stuck = StuckTracker.from_dict(saved.stuck, self.spec.stuck)
            if ended and ended["terminal_reason"] == "infra_flake":
                self.state.next = "tools"  # the turn's calls run again (it was an install)
            elif saved.finished and self.state.messages[-1]["role"] == "assistant":
                # The context was full after the model's turn: ask it to carry on.
                append_user_text(self.state.messages, "Continue from where you stopped.")
                self.state.next = "query"
            return None
        messages = list(saved.messages) if saved else []
        close_dangling(messages)
        # Each attempt's task (and the data before it) is a pinned region.
        append_user_text(messages, task, region="task")
        self.state = SessionState(
            session_key=self.spec.session_key, attempt=self.spec.attempt,
            try_no=self.spec.try_no, mode=self.spec.mode, messages=messages,
        )
        if self.baseline is not None:
            self.stuck.seed(self.baseline)
            self._note_tests(self.baseline, turn=0)
        self._save()
        return None

    def _save(self) -> None:
        now = time.monotonic()
        self.state.elapsed_ms += int((now - self.started) * 1000)
        self.started = now
        self.state.stuck = self.stuck.to_dict()
        if self.workspace is not None:
            self.state.workspace = self.workspace.snapshot()
        self.checkpointer.save(self.spec.session_key, self.state.to_checkpoint())

    def final_plan(self) -> str:
        """The unsanitized text of the last assistant turn (a reassess session's plan)."""
        return last_text(self.state.messages)

    @property
    def usage(self) -> Usage:
        return self.state.usage

    # --- the loop ----------------------------------------------------------------

    def run(self, task: str) -> SessionResult:
        """Run (or resume) the session to its end and return the result payload."""
        done = self._begin(task)
        if done is not None:
            return done
        while True:
            step = self.state.next
            # Checked once per turn, before the model is asked: the turn before it ran to
            # its end (tool results appended), so the checkpoint resumes cleanly.
            if step == "query" and self.cancel.is_set():
                return self._finish("cancelled", "cancelled", "the session was stopped (a "
                                    "person or the project's budget); its checkpoint resumes it")
            if step == "tools":
                ended = self._run_tools()
                if ended is not None:
                    return ended
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
        elapsed_s = (self.state.elapsed_ms + (time.monotonic() - self.started) * 1000) / 1000
        spent = [
            ("budget_turns", self.state.turns >= b.max_turns, f"{b.max_turns} turns"),
            (
                "budget_tokens",
                usage.prompt_tokens + usage.output_tokens >= b.max_tokens,
                f"{b.max_tokens} tokens",
            ),
            ("budget_usd", self.state.cost_usd >= b.max_usd, f"${b.max_usd:.2f}"),
            ("budget_wall_time", elapsed_s >= b.max_wall_s, f"{b.max_wall_s:.0f} s of wall time"),
        ]
        for reason, hit, what in spent:
            if hit:
                return self._owed_only_end() or self._finish(
                    "budget_exceeded", reason, f"the budget of {what} is spent"
                )
        return None

    def _owed_only_end(self) -> SessionResult | None:
        """A budget ran out after the one reminder, with nothing but paperwork owed: if the
        work still passes its check, the session completes and what it owes is recorded
        missing (bookkeeping never costs the attempt)."""
        if not self.state.owed_only:
            return None
        report = self._report()
        if report.failures:
            return None
        self.state.paperwork_missing = report.owed
        return self._finish("completed", "end_turn", None)

    def _report(self) -> CheckReport:
        """The role's self-check, as a report (a plain list is all failures)."""
        found = self.self_check() if self.self_check else []
        return found if isinstance(found, CheckReport) else CheckReport(failures=found)

    def _unstick(self) -> SessionResult | None:
        """When stuck, hand one turn to reassess and pin its plan; stuck twice ends it.

        Reassess may ask for the files of the best state back (the most tests passing);
        the runtime reverts them before the session carries on.
        """
        why = self.stuck.tripped()
        if why is None:
            return None
        if self.reassess is None or self.state.reassessed >= self.spec.reassess_limit:
            return self._finish("stuck", "stuck", f"stuck: {why}")
        changes = self.workspace.describe_changes() if self.workspace else "(unknown)"
        best = self.state.best
        offer = None
        if self.spec.revert_to_best:
            offer = regions.best_words(best, self.state.last_tests)
        plan = self.reassess(why, self.state.last_error, changes, offer)
        self.state.reassessed += 1
        self.state.pinned.append(plan)
        reverted = None
        if offer and best and self.workspace is not None and regions.wants_revert(plan):
            self.workspace.revert_to(best["snapshot"])
            reverted = offer.split(";")[0] + ": its files are back; re-read before you edit."
            self.state.reverted += 1
        # The plan is a model's text: it is pinned as wrapped data in the transcript (a
        # region block, kept when old turns are summarised), never in the system prompt,
        # which stays the same every turn and so stays cached.
        append_block(self.state.messages, regions.plan_block(why, plan, reverted))
        self.stuck.reset()
        self._save()
        return None

    def _system(self) -> str:
        """The system prompt: the spec's, unchanged for the whole session."""
        return self.spec.system

    def _query(self) -> SessionResult | None:
        """Ask the model for its next turn and record it before acting on it."""
        messages = self.state.messages
        self.state.compacted += fit(messages, self.spec.context_budget_tokens)
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
        except (LLMAuthError, LLMUnpriced) as exc:
            # The key, its permissions or the account, or a model no cap can price: no
            # session can run until a person fixes it; the checkpoint is kept, no attempt
            # is spent.
            return self._finish("recovery_required", REFUSED, str(exc))
        except LLMBadRequest as exc:
            if exc.status != 404 or "model" not in str(exc):
                return self._finish("recovery_required", INVALID, str(exc))
            return self._finish("recovery_required", REFUSED, f"unknown model: {exc}")
        except LLMError as exc:
            return self._finish("failed", "llm_error", str(exc))
        self.state.turns += 1
        self.state.usage = self.usage + response.usage
        self.state.cost_usd += response.cost_usd
        messages.append({"role": "assistant", "content": response.content})
        reason = response.stop_reason
        has_tools = any(b.get("type") == "tool_use" for b in response.content)
        if has_tools:
            self.state.next = "tools"
        elif reason in ("end_turn", "stop_sequence"):
            self.state.next = "check"
        elif reason == "max_tokens":
            append_user_text(
                messages,
                "Your reply hit the output limit. Continue from where "
                "it stopped, in smaller steps.",
            )
        elif reason == "model_context_window_exceeded":
            half = approx_tokens(messages) // 2
            if not (
                compact(messages, half, keep_recent=2)
                or clear_old_tool_outputs(messages, half, keep_recent=2)
            ):
                return self._finish("recovery_required", "context_window", "context is full")
        elif reason == "refusal":
            return self._finish("failed", "refusal", "the model refused to continue")
        # pause_turn: the assistant turn goes back as it is, and the model carries on.
        u = self.usage
        self.ctx.emit(
            ProgressEvent(
                "turn", turn=self.state.turns, tokens=u.prompt_tokens + u.output_tokens
            )
        )
        self._save()
        return None

    def _run_tools(self) -> SessionResult | None:
        """Execute every tool call of the last assistant turn, then checkpoint the results.

        A call that failed for the infrastructure's sake (a package install timed out)
        ends the session `recovery_required` before any result is kept, so the step runs
        again and the resumed session runs this turn's calls again.
        """
        results: list[dict[str, Any]] = []
        written: list[str] = []
        created: list[str] = []
        tallies: list[tuple[str, TestTally]] = []
        window_changed = False
        for block in self.state.messages[-1]["content"]:
            if block.get("type") != "tool_use":
                continue
            name, args = block.get("name", ""), block.get("input")
            result = self.toolset.execute(self.ctx, name, args)
            if result.infra_flake:
                return self._finish("recovery_required", "infra_flake", result.infra_flake)
            self.stuck.observe_call(name, args, result.text if result.is_error else None)
            if result.is_error:
                self.state.last_error = result.text[:2000]
                entry = regions.failure_entry(name, result.text)
                window_changed |= regions.remember(self.state.errors, entry)
            regions.track_files(self.state, result)
            if getattr(self.toolset.tools.get(name), "writes", False):
                written += result.changed_files
            created += result.created_files
            if result.tests is not None:
                tallies.append((name, result.tests))
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
            target = args.get("path") if isinstance(args, dict) else None
            self.ctx.emit(ProgressEvent("tool", detail={
                "name": name, "error": result.is_error,
                "path": target if isinstance(target, str) else None}))
        if self.workspace is not None:
            self.stuck.observe_turn(self.workspace.fingerprint(), written, created)
        for tool, tally in tallies:
            self.stuck.observe_tests(tally)
            self._note_tests(tally, turn=self.state.turns)
            red = regions.tests_entry(tool, tally)
            if red is not None:
                window_changed |= regions.remember(self.state.errors, red)
        if window_changed:
            results.append(regions.errors_block(self.state.errors))
        self.state.messages.append({"role": "user", "content": results})
        self.state.next = "query"
        self._save()
        return None

    def _note_tests(self, tally: TestTally, turn: int) -> None:
        """Keep the last run's counts, and the files of the state where most tests passed
        (at turn 0 nothing has changed yet: the empty snapshot is the view as made)."""
        snapshot = self.workspace.snapshot if self.workspace and turn else dict
        regions.note_tests(self.state, tally, turn, snapshot)

    def _check(self) -> SessionResult | None:
        """The model says it is done: run the role's self-check. Failures of the work go
        back at most `self_check_rounds` times, then the session is validation_failed;
        what only the model can give is asked for once, by name, and never fails it."""
        report = self._report()
        failures, owed = report.failures, report.owed
        # Asked only when a turn is left to give it in: the reminder must never be what
        # spends the turn budget.
        ask = (bool(owed) and not self.state.reminded
               and self.state.turns < self.spec.budgets.max_turns)
        self.state.owed_only = ask and not failures
        if not failures and not ask:
            self.state.paperwork_missing = owed
            return self._finish("completed", "end_turn", None)
        if failures and self.state.self_checks >= self.spec.self_check_rounds:
            self.state.self_check_failures = failures
            self.state.paperwork_missing = owed
            return self._finish("failed", "validation_failed", "; ".join(failures))
        parts = []
        if failures:
            self.state.self_checks += 1
            parts.append(
                "The runtime's self-check failed; fix each item, then finish again:\n"
                + "\n".join(f"- {f}" for f in failures)
            )
        if ask:
            self.state.reminded = True
            parts.append(REMINDER + "\n" + "\n".join(f"- {o}" for o in owed))
        append_user_text(self.state.messages, "\n\n".join(parts))
        self.state.next = "query"
        self._save()
        return None

    def _finish(self, status: SessionStatus, reason: str, summary: str | None) -> SessionResult:
        """Build the result payload, checkpoint it as finished, and return it."""
        self._save()
        result = self._result(status, reason, summary)
        self.state.finished, self.state.result = True, result.model_dump(mode="json")
        self.checkpointer.save(self.spec.session_key, self.state.to_checkpoint())
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
            final_text=sanitize_summary(last_text(self.state.messages)),
            failure_summary=sanitize_summary(summary, 2000) if summary else None,
            usage=self.usage,
            cost_usd=round(self.state.cost_usd, 6),
            turns=self.state.turns,
            duration_ms=self.state.elapsed_ms,
            self_check_failures=self.state.self_check_failures,
            paperwork_missing=self.state.paperwork_missing,
            changed_files=self.state.changed_files,
        )
