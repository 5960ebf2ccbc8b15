"""Names of every Redis key the store uses, in one place (the layout is in the package doc)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from devloop.core.ids import check_id

ROOT = "devloop"
Ledger = Literal["bugs", "timeline"]
LEDGERS: tuple[Ledger, ...] = ("bugs", "timeline")
EVENTS_MAXLEN = 10_000  # live events kept per project (XADD MAXLEN ~)


@dataclass(frozen=True)
class Keys:
    """The key names of one project; ids that break the id rule never become keys."""

    pid: str

    def __post_init__(self) -> None:
        check_id(self.pid, "project id")

    @property
    def prefix(self) -> str:
        """`devloop:{pid}:`; every key of the project starts with it."""
        return f"{ROOT}:{self.pid}:"

    @property
    def pattern(self) -> str:
        """A SCAN/KEYS pattern matching every key of the project."""
        return _escape_glob(self.prefix) + "*"

    @property
    def project(self) -> str:
        """Hash: units_json, company_id, stack, conventions, version (their digest)."""
        return self.prefix + "project"

    @property
    def sdd(self) -> str:
        """Hash: unit id -> standalone SDD section document (HTML)."""
        return self.prefix + "sdd"

    @property
    def contracts(self) -> str:
        """Hash: unit id -> the SDD contract (JSON)."""
        return self.prefix + "contracts"

    @property
    def specs(self) -> str:
        """Hash: unit id -> spec.json (JSON), derived ones included."""
        return self.prefix + "specs"

    @property
    def memory(self) -> str:
        """Hash: `{role}/{name}.md` -> note bytes (memory/devloop/ on disk); notes a unit's
        sessions wrote wait as `{role}/pending/{unit}/{name}.md` until that unit passes."""
        return self.prefix + "memory"

    @property
    def agent_state(self) -> str:
        """Hash: path relative to agent-state/ -> bytes."""
        return self.prefix + "agent-state"

    def stream(self, ledger: Ledger) -> str:
        """Stream of one ledger's records (bugs.ndjson, timeline.ndjson)."""
        return f"{self.prefix}stream:{ledger}"

    @property
    def events(self) -> str:
        """Stream of the project's live events (unit state changes, runs starting, pauses):
        what the console streams; trimmed to about EVENTS_MAXLEN entries. A cascade of
        state changes is one entry per batch of units (store.state.event_states)."""
        return f"{self.prefix}stream:events"

    def unit_ledger(self, ledger: Ledger, unit: str) -> str:
        """Stream: the unit's own entries of a ledger, with the project stream's ids and
        lines (store/ledgerindex.py), so one unit's history is read without the ledger."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:{ledger}"

    @property
    def bug_units(self) -> str:
        """Hash: bug id -> its unit (a bug_transition line names only the bug)."""
        return self.prefix + "bug-units"

    @property
    def ledger_index(self) -> str:
        """Hash: ledger -> 1 once every entry of its stream is in its unit's stream too."""
        return self.prefix + "ledger-index"

    def files(self, unit: str) -> str:
        """Hash: path relative to units/{unit} -> bytes."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:files"

    def meta(self, unit: str) -> str:
        """Hash: version (int), imported (digest of the files at the last import)."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:meta"

    def commits(self, unit: str) -> str:
        """Hash: `{role}:{attempt}` -> the version that commit produced."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:commits"

    def passed(self, unit: str) -> str:
        """Hash: code/** and contract.json as they were when the unit last passed."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:passed"

    def state(self, unit: str) -> str:
        """String: the unit's UnitState (JSON)."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:state"

    def session(self, role: str, unit: str) -> str:
        """String: the transcript checkpoint of one (role, unit) session (JSON)."""
        return f"{self.prefix}session:{role}:{check_id(unit, 'unit id')}"

    def lease(self, unit: str, attempt: int, role: str) -> str:
        """String with a TTL: the owner of one (unit, attempt, role) run."""
        return f"{self.prefix}lease:{check_id(unit, 'unit id')}:{attempt}:{role}"

    @property
    def control(self) -> str:
        """Hash: max_usd, default_max_usd, paused, paused_at, epoch, cancel:{unit},
        reset:{unit}, spec:{unit}, console_url (store/control.py)."""
        return self.prefix + "control"

    @property
    def spend(self) -> str:
        """Hash: total, unit:{id}, scripted: nanodollars spent on model calls (HINCRBY)."""
        return self.prefix + "spend"

    @property
    def spent(self) -> str:
        """String: dollars an earlier DevLoop counted (INCRBYFLOAT); still counted."""
        return self.prefix + "spent"

    def steps(self, unit: str) -> str:
        """Hash: `{role}:{attempt}:{try}` -> StepRecord (JSON)."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:steps"

    def finished(self, unit: str) -> str:
        """Set: the dependencies of unit that have passed (its release counts them)."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:finished"

    def dispatched(self, unit: str) -> str:
        """String: set NX when unit is first released (root, again, reconciled)."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:dispatched"

    @property
    def environment_error(self) -> str:
        """String: why no session can run on a worker's host (the worker that found it)."""
        return self.prefix + "environment-error"

    def approved(self, unit: str) -> str:
        """Hash: path -> bytes: code/**, tests/**, contract.json as last approved."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:approved"

    def approved_meta(self, unit: str) -> str:
        """Hash: version, digest, attempt, by, ts of the last approval."""
        return f"{self.prefix}unit:{check_id(unit, 'unit id')}:approved-meta"

    @property
    def progress(self) -> str:
        """Hash: unit -> StepProgress (JSON): the running session's last step."""
        return self.prefix + "progress"

    @property
    def llm(self) -> str:
        """String: the model of the run driving the project ("stub", ...)."""
        return self.prefix + "llm"

    @property
    def definitions(self) -> str:
        """Hash: unit -> Definition (JSON): what the unit was last run on."""
        return self.prefix + "definitions"

    def notified(self, event_id: str) -> str:
        """String with a TTL: the webhook notifier that claimed one event."""
        return f"{self.prefix}notified:{event_id}"

    @property
    def followups(self) -> str:
        """Hash: unit -> the follow-up (JSON) its last transition still has to do."""
        return self.prefix + "followups"

    @property
    def reconcile_lock(self) -> str:
        """String with a TTL: a reconcile pass is under way (one at a time)."""
        return self.prefix + "reconcile-lock"

    @property
    def lease_pattern(self) -> str:
        """A SCAN pattern matching every lease of the project."""
        return _escape_glob(f"{self.prefix}lease:") + "*"

    def unit_lease_pattern(self, unit: str) -> str:
        """A SCAN pattern matching every lease of one unit (any attempt, any role)."""
        return _escape_glob(f"{self.prefix}lease:{check_id(unit, 'unit id')}:") + "*"

    def unit_session_pattern(self, unit: str) -> str:
        """A SCAN pattern matching every session checkpoint of one unit (any role)."""
        return _escape_glob(f"{self.prefix}session:") + "*" + _escape_glob(
            f":{check_id(unit, 'unit id')}")

    # -- live output of test runs (store/output.py) --

    def output(self, unit: str, run: str) -> str:
        """Stream: one test run's live output, {s: stdout|stderr, d: text}, then {end: 1}."""
        unit, run = check_id(unit, "unit id"), check_id(run, "run id")
        return f"{self.prefix}output:{unit}:{run}"

    def output_runs(self, unit: str) -> str:
        """List: the unit's run ids with live output, newest first (the last few)."""
        return f"{self.prefix}output:{check_id(unit, 'unit id')}:runs"

    def output_pattern(self, unit: str) -> str:
        """A SCAN pattern matching every live output key of one unit."""
        return _escape_glob(f"{self.prefix}output:{check_id(unit, 'unit id')}:") + "*"


def company_memory(company_id: str) -> str:
    """Hash: `{role}/{pid}--{unit}--{name}.md` -> note promoted from a passed unit of any of
    the company's projects. `@` cannot start a project id, so no project's keys match it."""
    return f"{ROOT}:@company:{check_id(company_id, 'company id')}:memory"


def project_record_pattern() -> str:
    """A SCAN pattern matching every project record of the server (one per project)."""
    return f"{ROOT}:*:project"


def pid_of_record(key: str) -> str | None:
    """The project id of a project record's key, or None when it is not one."""
    pid = key.removeprefix(f"{ROOT}:").removesuffix(":project")
    return pid if pid and ":" not in pid and pid != key else None


def _escape_glob(text: str) -> str:
    """Text with Redis glob metacharacters escaped, for a literal prefix match."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
