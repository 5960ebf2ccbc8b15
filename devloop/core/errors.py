"""Errors a user can cause, and the exceptions DevLoop raises.

Every exception DevLoop defines is a DevLoopError (tests/test_errors.py holds this
drawing to the code: each class at its parent, its other bases named after "also").
Some keep a builtin base too, for the callers that catch them as that.

    DevLoopError                      base of every DevLoop exception
    +-- ProjectInvalid                a project folder has problems (carries every Problem)
    +-- SpecInvalid                   a project spec has problems (scaffold/check.py)
    +-- FileTooLarge                  a unit's files exceed the size cap
    +-- InvalidId (also ValueError)   an id breaking the id rule or leaving its root (ids.py)
    +-- UnsafePath                    a stored path landing outside its dir (store/filesets.py)
    +-- Refused (also OSError)        a path a Dir will not touch (beneath.py, safedir.py)
    |   +-- TooMany                   a walk met more entries than its limit (safetree.py)
    +-- NotPrivate                    a path that must be this user's alone is not (private.py)
    |   +-- ForeignData               data Redis would load that DevLoop never wrote (redis_data.py)
    |   +-- CacheUntrusted (also SandboxUnavailable)   the cache dir is someone else's (cachedir.py)
    +-- SandboxUnavailable            bubblewrap cannot create its namespaces on this host
    +-- CheckInterrupted              a self-check's command was killed from outside
    +-- ToolchainError                a stack toolchain could not be installed (toolchain.py)
    +-- HollowError (also ValueError) a module that cannot be hollowed (runners/hollow_py.py)
    +-- ContractMissingExports (also ValueError)   a contract without exports (contracts.py)
    +-- DecisionInvalid               a coder.log decision missing fields (ledgers/coderlog.py)
    +-- BugTransitionError            a bug state change the state machine forbids (ledgers/bugs.py)
    +-- BugNotOwned                   a session moving another unit's bug (ledgers/bugs.py)
    +-- ProjectNotImported            a project id with no record in Redis (store/records.py)
    +-- LeaseLost                     a fenced write whose lease is another's (store/fence.py)
    +-- SyncStuck                     the folder's sync lock held too long (store/synclock.py)
    +-- FolderBusy                    another live run holds the project folder (runlock.py)
    +-- RedisServerError              redis-server could not be found, started or stopped
    +-- StepBusy                      a step's lease held by a live run elsewhere (fleet/steps.py)
    +-- StepWaiting                   run the step again later (fleet/failures.py)
    +-- StepStopped                   the chain ends at this step (fleet/failures.py)
    |   +-- StepSuperseded            the unit moved past this attempt
    |   +-- StepPaused                the project is paused: the step stores nothing
    |   +-- EnvironmentBroken         this host cannot run any session: the run stops
    |   +-- UnitBlocked               the step blocked its unit
    +-- ReviewRefused (also ValueError)   a unit not waiting for a review (fleet/review.py)
    +-- BadSignature (also ValueError)    a signed call that does not hold (fleet/signing.py)
    +-- LLMError                      a model call failed (llm/base.py)
    |   +-- LLMTransient              worth retrying; raised once the retries ran out
    |   |   +-- LLMRateLimited        429
    |   |   +-- LLMOverloaded         529
    |   |   +-- LLMServerError        5xx, 408, 409
    |   |   +-- LLMConnectionError    no HTTP response at all
    |   +-- LLMAuthError              401/402/403: the key or the account needs a person
    |   +-- LLMBadRequest             400 and kin: the request cannot succeed as sent
    |   +-- LLMUnpriced               a model without a price: no spend cap can hold
    +-- ScriptInvalid                 a stub script has problems (llm/stub/yamlmarks.py)
    +-- _DuplicateKey                 a stub script's mapping repeats a key (found again, slowly)
    +-- TemplateError (also ValueError)   a stub template that cannot be filled (llm/stub)
    +-- TooManyBreakpoints (also ValueError)   more cache_control blocks than the API allows
    +-- RelayAnswerInvalid            a relay answer that cannot be served (llm/stub/relay)
    +-- Unanswered                    no relay answer was written in time (llm/stub/relay)
    +-- ListenFailed                  the console cannot listen where asked (console/listen.py)
    +-- SessionRefused                a debug session that cannot start (debug_session.py)
    +-- QueueUnreachable              the task queue's broker does not answer (fleet/queue.py)
    +-- CrashLoop                     a child of the run keeps dying (cli/run/children.py)
    +-- GaveUp                        a run stopping short of done (cli/run/project_run.py)

Not an error: supervisor.Interrupted is a KeyboardInterrupt (SIGINT, SIGTERM or SIGHUP
raised in the main thread so clean-up runs), and stays one so `except Exception` never
swallows a shutdown.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with user input: the file, the field, what is wrong and the fix."""

    file: str
    field: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        text = f"{self.file}: {self.field}: {self.message}"
        return f"{text}; fix: {self.fix}" if self.fix else text


class DevLoopError(Exception):
    """Base of every DevLoop exception."""


class ProjectInvalid(DevLoopError):
    """A project folder failed validation; `problems` lists each one."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class FileTooLarge(DevLoopError):
    """A unit's files exceed the size cap."""


class CheckInterrupted(DevLoopError):
    """A self-check's command was killed from outside (a shutdown): no verdict on the work."""


class SandboxUnavailable(DevLoopError):
    """Bubblewrap cannot run here; the message says why and how to fix it."""
