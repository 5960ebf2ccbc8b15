"""Pydantic models of every file format and payload DevLoop reads or writes.

Field names follow the seed specifications exactly, because other tools read the same
files. Models of files (``*File``/``Record`` subclasses) keep unknown fields so a
round trip through DevLoop never drops what another tool wrote.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from devloop.core.ids import CompanyId, ProjectId, UnitId

UnitKind = Literal["be", "fe", "db", "mw", "lib"]
# units.json's optional `review`: "required" makes a unit with green tests wait for a
# person's approval before it passes (the project's value, or a unit's own).
Review = Literal["required", "none"]
Stack = Literal["node", "python"]
BugStatus = Literal["open", "fixing", "fixed"]
NextAction = Literal["none", "retry_coder", "retry_tester", "block"]
CoderMode = Literal["implement", "retry", "resume"]
TesterMode = Literal["test", "retry", "resume"]


class Record(BaseModel):
    """A file-backed record: unknown fields are kept and written back."""

    model_config = ConfigDict(extra="allow")

    def to_json_dict(self) -> dict[str, Any]:
        """Serialize for a file, keeping unknown fields and omitting unset optionals."""
        return self.model_dump(mode="json", exclude_none=True)

    def to_json_text(self) -> str:
        """`to_json_dict` as indented JSON text, serialized by pydantic-core.

        The same text as json.dumps(indent=2, ensure_ascii=False), whose indenting
        encoder is pure Python: 5 ms for a 200-unit units.json, written per session.
        """
        return self.model_dump_json(indent=2, exclude_none=True)


class Payload(BaseModel):
    """A message that crosses a process: strict, no unknown fields."""

    model_config = ConfigDict(extra="forbid")


# --- units.json, spec.json, contract.json ------------------------------------------


class UnitEntry(Record):
    """One unit in units.json."""

    id: UnitId
    kind: UnitKind
    depends_on: list[UnitId] = Field(default_factory=list)
    contract_hash: str
    stack: Stack | None = None
    review: Review | None = None


class _UnitIndex:
    """Unit id -> entry (the first, when ids repeat) of one list of units, built on the first
    lookup and again when the list is another (a model_copy) or its length changed. A cache,
    so never part of a model's value: any two compare equal."""

    __slots__ = ("size", "table", "units")

    def __init__(self) -> None:
        self.units: list[UnitEntry] | None = None
        self.size = 0
        self.table: dict[str, UnitEntry] = {}

    def get(self, units: list[UnitEntry], unit_id: str) -> UnitEntry | None:
        if self.units is not units or self.size != len(units):
            table: dict[str, UnitEntry] = {}
            for entry in units:
                table.setdefault(entry.id, entry)
            self.units, self.size, self.table = units, len(units), table
        return self.table.get(unit_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _UnitIndex)

    __hash__ = None  # type: ignore[assignment]


class UnitsFile(Record):
    """units.json: the project's unit registry."""

    company_id: CompanyId
    project_id: ProjectId
    stack: Stack = "node"
    units: list[UnitEntry]
    review: Review | None = None
    _index: _UnitIndex = PrivateAttr(default_factory=lambda: _UnitIndex())

    def unit(self, unit_id: str) -> UnitEntry | None:
        """The entry for unit_id, or None (O(1): commands look up every unit of a project)."""
        return self._index.get(self.units, unit_id)


class UnitSpec(Record):
    """units/{id}/spec.json: the architect's metadata for one unit."""

    unit_id: UnitId
    kind: UnitKind
    depends_on: list[UnitId] = Field(default_factory=list)
    acceptance_criteria: list[str] = Field(default_factory=list)
    stack: Stack | None = None


class Contract(Record):
    """units/{id}/contract.json: what a unit exposes, with its self-declared hash."""

    unit_id: UnitId
    version: str
    exports: dict[str, Any]
    consumes: list[Any] = Field(default_factory=list)


# --- coder.log ----------------------------------------------------------------------


class CoderDecision(Record):
    """One `---` block of coder.log."""

    attempt: int
    ts: str | None = None
    last_failure: str | None = None
    last_cause: str | None = None
    this_fix: str
    rationale: str
    changed_files: list[str]


# --- runs/{runId}/result.json ---------------------------------------------------------


# One test's outcome in a run. The seed's summary has four counts; the finer outcomes are
# counted inside them (SEED_COUNT) and again, by themselves, in RunStatuses.
TestOutcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed", "todo"]
SEED_COUNT: dict[str, Literal["passed", "failed", "skipped"]] = {
    "passed": "passed",
    "xpassed": "passed",  # a non-strict xfail that passed: not a failure
    "failed": "failed",  # a strict xfail that passed is reported failed
    "error": "failed",  # a fixture's set-up or teardown raised
    "skipped": "skipped",
    "xfailed": "skipped",  # failed as the test said it would
    "todo": "skipped",  # vitest's test.todo: written down, not run
}


class RunSummary(Record):
    """Counts of one test run."""

    total: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    @classmethod
    def of(cls, outcomes: dict[str, str]) -> RunSummary:
        """The seed's counts of per-test outcomes (finer ones folded by SEED_COUNT)."""
        seed = [SEED_COUNT.get(o, "skipped") for o in outcomes.values()]
        return cls(total=len(seed), passed=seed.count("passed"), failed=seed.count("failed"),
                   skipped=seed.count("skipped"))


class RunStatuses(Record):
    """The finer counts, each also inside the seed's summary: errors among the failed,
    xpassed among the passed, xfailed and todo among the skipped."""

    errors: int = 0
    xfailed: int = 0
    xpassed: int = 0
    todo: int = 0

    @classmethod
    def of(cls, outcomes: dict[str, str]) -> RunStatuses:
        """The finer counts of per-test outcomes."""
        found = list(outcomes.values())
        return cls(errors=found.count("error"), xfailed=found.count("xfailed"),
                   xpassed=found.count("xpassed"), todo=found.count("todo"))


class Failure(Record):
    """One failed test, with the hint the coder acts on."""

    test: str
    expected: Any = None
    got: Any = None
    stack: str = ""
    hint: str = ""
    bug_id: str | None = None
    # "tests": the tests' own set-up is at fault (a missing fixture or package, a fixture
    # that raised, a stale strict xfail), so the tester fixes it, not the coder.
    fault: Literal["tests"] | None = None


# What `devloop mutants` measured per unit: {unit: {score, killed, run, sites, survived}}.
MUTATION_FILE = "agent-state/mutation.json"


class CriterionProof(Record):
    """One acceptance criterion (or status code) and the tests that prove it."""

    criterion: str
    # Tests that exercise it, pass on the code and fail on its hollow build.
    proving: list[str] = Field(default_factory=list)
    # Tests that exercise it but pass on the hollow build too: they cannot fail.
    hollow: list[str] = Field(default_factory=list)
    # Tests that exercise it which neither run reported by that name (a computed title).
    unmatched: list[str] = Field(default_factory=list)


class Adequacy(Record):
    """Whether a green run's tests can fail: the run again against a hollow build of code/."""

    measured: bool
    reason: str | None = None  # why it was not measured
    # Not measured because of what the tests did (they crashed on the hollow build): the
    # unit waits until they run there. Otherwise an unmeasured run holds nothing back.
    tests_fault: bool = False
    tests: int = 0
    # Tests that passed on the code and still pass on the hollow build.
    cannot_fail: list[str] = Field(default_factory=list)
    criteria: list[CriterionProof] = Field(default_factory=list)
    status_codes: list[CriterionProof] = Field(default_factory=list)
    criteria_proven: float | None = None  # share of the criteria some proving test covers
    hollow_wall_s: float | None = None


class FileCoverage(Record):
    """Line and branch coverage of one file, as covered/total (None: nothing to count)."""

    lines: float | None = None
    branches: float | None = None


class CodeCoverage(Record):
    """Coverage of code/ by the run's tests, from coverage.py or coverage-v8: detail the
    tests' own process wrote, never part of the verdict."""

    lines: float | None = None
    branches: float | None = None
    files: dict[str, FileCoverage] = Field(default_factory=dict)
    # "code/cart.py: total": an exported function, method or constructor no test ran.
    unexecuted: list[str] = Field(default_factory=list)


class NotRun(Record):
    """Tests the unit has that its run left out, and why (so a green run does not hide them)."""

    files: list[str]
    reason: str


class RunResult(Record):
    """runs/{runId}/result.json: the tester's structured verdict."""

    run_id: str
    loop: str = "L1"
    unit_id: str
    agent: str = "tester"
    attempt: int
    ok: bool
    crashed: bool = False
    crash_reason: str | None = None
    summary: RunSummary = Field(default_factory=RunSummary)
    failures: list[Failure] = Field(default_factory=list)
    next_action: NextAction = "none"
    retry_budget_left: int = 0
    duration_ms: int = 0
    stdout_tail: str | None = None
    # Test files found and not run (vitest type tests without a type checker), and why.
    not_run: NotRun | None = None
    # Where the time went: wall clock, CPU of every process of the run, and time the run
    # had runnable processes but none on a CPU (a busy machine, not slow code).
    wall_s: float | None = None
    cpu_s: float | None = None
    wait_s: float | None = None
    # Starved: the machine gave the run too little CPU to judge the code; an
    # infrastructure result (neither green nor red) that the loop re-runs later.
    starved: bool = False
    starved_reason: str | None = None
    # sha256 of the code the tests ran against (code/** as DevLoop hashes a file set).
    code_digest: str | None = None
    # A green run's tests against a hollow build of code/ (devloop/roles/adequacy.py).
    adequacy: Adequacy | None = None
    # Line and branch coverage of code/ (None: not measured, or its report was unreadable).
    coverage: CodeCoverage | None = None
    # Beside the seed's summary: the finer counts, and each test's outcome (test -> outcome,
    # names as in Failure.test); None for a run that did not really run.
    statuses: RunStatuses | None = None
    outcomes: dict[str, TestOutcome] | None = None


# --- bugs.ndjson ----------------------------------------------------------------------


class BugOpen(Record):
    """A bug_open line of bugs.ndjson."""

    event: Literal["bug_open"] = "bug_open"
    id: str
    ts: str
    status: BugStatus = "open"
    source: str
    unit_id: str
    run_id: str
    test_name: str
    category: str = "unknown"
    severity: str = "medium"
    title: str
    detail: str = ""
    affected_units: list[str] = Field(default_factory=list)


class BugTransition(Record):
    """A bug_transition line of bugs.ndjson."""

    event: Literal["bug_transition"] = "bug_transition"
    id: str
    ts: str
    to: BugStatus
    by: str
    fix_refs: list[str] = Field(default_factory=list)


class Bug(BaseModel):
    """A bug folded from its events: the current state (unknown fields kept)."""

    model_config = ConfigDict(extra="allow")

    id: str
    status: BugStatus
    unit_id: str
    test_name: str
    source: str
    severity: str
    title: str
    run_id: str
    category: str = "unknown"
    detail: str = ""
    affected_units: list[str] = Field(default_factory=list)
    opened_at: str = ""
    history: list[BugTransition] = Field(default_factory=list)

    @property
    def dedup_key(self) -> str:
        """`{unit}:{test}`: one live bug per failing test of a unit."""
        return f"{self.unit_id}:{self.test_name}"


# --- timeline.ndjson ------------------------------------------------------------------


class TimelineEvent(Record):
    """One line of timeline.ndjson (kinds: unit_coded, code_patched, unit_tested, ...)."""

    ts: str
    kind: str
    unit_id: str | None = None
    ref: str | None = None
    summary: str = ""
    agent: str | None = None


# --- role inputs and outputs ----------------------------------------------------------


class HistoryEntry(Payload):
    """One previous attempt, injected into a coder retry."""

    attempt: int
    my_decision: str
    tester_said: list[Any] = Field(default_factory=list)
    tester_summary: str = ""  # the tester's closing summary of that attempt (its analysis)


class CoderInput(Payload):
    """What the loop hands a coder session."""

    pid: ProjectId
    unit_id: UnitId
    mode: CoderMode
    history: list[HistoryEntry] | None = None
    reflect_hint: str | None = None
    resume_token: str | None = None
    call_id: str
    company_id: CompanyId


class DecisionSummary(Payload):
    """The main coder.log entry of a coder session, summarized."""

    last_failure: str | None = None
    this_fix: str
    rationale: str
    changed_files: list[str] = Field(default_factory=list)


class CoderOutput(Payload):
    """What a coder session reports back."""

    ok: bool
    mode: str
    unit_id: str
    attempt: int
    files_written: list[str] = Field(default_factory=list)
    contract_hash: str
    contract_match_sdd: bool
    decision: DecisionSummary
    sandbox_violations: list[str] = Field(default_factory=list)
    duration_ms: int
    tokens_used: int


class TesterInput(Payload):
    """What the loop hands a tester session."""

    pid: ProjectId
    unit_id: UnitId
    mode: TesterMode
    resume_token: str | None = None
    call_id: str
    company_id: CompanyId


class BugMove(Payload):
    """One bug state change made by a tester session."""

    id: str
    from_: BugStatus = Field(alias="from")
    to: BugStatus

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class TesterOutput(Payload):
    """What a tester session reports back."""

    ok: bool
    mode: str
    unit_id: str
    run_id: str
    result_ref: str
    summary: RunSummary
    failures: list[Failure] = Field(default_factory=list)
    bugs_opened: list[str] = Field(default_factory=list)
    bugs_transitioned: list[BugMove] = Field(default_factory=list)
    acceptance_coverage: float = Field(ge=0, le=1)
    contract_coverage: float = Field(ge=0, le=1)
    crashed: bool
    duration_ms: int
    tokens_used: int
    sandbox_violations: list[str] = Field(default_factory=list)
    starved: bool = False  # the last run got too little CPU to judge the code
    coverage: CodeCoverage | None = None  # the last run's coverage of code/, when measured
    # Nothing ran (the session had already finished): the earlier run this reports.
    reused_run: str | None = None
    # A zero-token re-run: no tester session, the tests a tester session of this attempt
    # checked (`tests_from_attempt`) ran unchanged on this attempt's code.
    rerun: bool = False
    tests_from_attempt: int | None = None


UnitStatus = Literal[
    "pending",
    "ready",
    "coding",
    "testing",
    "passed",
    "failed",
    "crashed",
    "validation_failed",
    "waiting_model",
    "review",  # tests green, waiting for a person's approval (units.json "review": "required")
    "blocked",
    "blocked_upstream",
]


class UnitState(BaseModel):
    """Where one unit is in the red/green loop (the store keeps it as JSON, changed by
    compare-and-set)."""

    model_config = ConfigDict(extra="forbid")

    status: UnitStatus = "pending"
    attempt: int = 0
    failure_signature: str | None = None
    signature_repeats: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    started_at: float | None = None
    updated_at: float | None = None
    last_hint: str | None = None
    last_error: str | None = None  # a step's exception or the model's error, one line
    blocked_reason: str | None = None
    # Its last decision was made in a run of the stub's scripted turns (`--llm stub`): a
    # pass then proves the script, not the code, and a run with a real model runs it again.
    scripted: bool = False
    extra: dict[str, Any] = Field(default_factory=dict)


class StepOutcome(BaseModel):
    """What a coder or tester step's session and test run came to: the only thing the loop
    decides on (a coder step's and a tester step's make an attempt's).

    Written by the worker that ran the step, never taken from a message; stored in the
    step's record (old records, without the newer fields, load with their defaults).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: str = "completed"  # the session's status ("completed" when none ran)
    reason: str = ""  # its terminal_reason (end_turn, validation_failed, ...)
    summary: str | None = None  # the session's failure summary (its self-check's findings)
    tester_ran: bool = False  # tester: a run happened (False: the coder did not finish)
    tests_ok: bool = False
    crashed: bool = False
    crash_reason: str | None = None
    # tester: the crash is the code's doing (it reached into the test framework): the
    # coder's to fix at once, since no tester retry can make such a run stand.
    code_fault: bool = False
    failures: list[tuple[str, str]] = []  # (test, what it got)
    hint: str | None = None
    starved: bool = False  # tester: the run got too little CPU to judge the code
    # tester: a failure is the tests' own set-up (a missing fixture or package, a fixture
    # that raised by itself): what is wrong, for the tester's next try.
    setup_fault: str | None = None
    # What the model still owed at the session's end after one reminder (its plan, its
    # reflection): recorded, never a failure (the attempt's code is tested all the same).
    paperwork_missing: list[str] = []
