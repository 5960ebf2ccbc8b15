"""Whether a green run's tests prove the acceptance criteria: tests that can fail. Pure.

A test proves something only if it can fail: it passed on the code and fails on the
hollow build (devloop/runners/hollow.py: the same names, every function doing nothing
while a test body runs). A criterion is proven by a test that exercises it
(devloop/roles/coverage.py: named after it and using its values) and can fail; so is a
status code the contract declares. An empty body, `assert True`, a swallowed assertion
or arithmetic that never calls code/ all pass on the hollow build, and prove nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from devloop.core.models import Adequacy, CriterionProof
from devloop.roles.coverage import TestBlock, checks_code, covers, values

HOLLOW = (
    "a hollow build of code/ (the same names, every function returning nothing and every "
    "route answering 501 while a test runs)"
)


@dataclass(frozen=True)
class Claims:
    """What a unit's tests must prove: its criteria and its contract's status codes."""

    stack: str
    criteria: list[str] = field(default_factory=list)
    status_codes: list[str] = field(default_factory=list)


def block_ids(block: TestBlock, ran: set[str], stack: str) -> list[str]:
    """The run's ids of a test block (pytest node ids, vitest `file::full name`)."""
    found = []
    for test_id in ran:
        file, _, rest = test_id.partition("::")
        if file != block.path:
            continue
        if stack == "python":
            if rest.rsplit("::", 1)[-1].split("[", 1)[0] == block.name:
                found.append(test_id)
        elif rest == block.name or rest.endswith(" " + block.name):
            found.append(test_id)
    return sorted(found)


def judge(
    tests: list[TestBlock],
    stack: str,
    passed: frozenset[str],
    hollow_passed: frozenset[str],
    hollow_failed: frozenset[str],
    criteria: list[str],
    codes: list[str],
) -> Adequacy:
    """Which criteria and status codes the tests that can fail prove."""
    ran = set(passed) | set(hollow_passed) | set(hollow_failed)
    ids = {id(b): block_ids(b, ran, stack) for b in tests}

    def proof(name: str, exercising: list[TestBlock]) -> CriterionProof:
        mine = sorted({i for b in exercising for i in ids[id(b)] if i in passed})
        return CriterionProof(
            criterion=name,
            proving=[i for i in mine if i in hollow_failed],
            hollow=[i for i in mine if i in hollow_passed],
            unmatched=sorted({f"{b.path}::{b.name}" for b in exercising if not ids[id(b)]}),
        )

    crit = [proof(c, [b for b in tests if covers(c, b, criteria)]) for c in criteria]
    code_proofs = [proof(c, [b for b in tests if checks_code(c, b)]) for c in codes]
    return Adequacy(
        measured=True,
        tests=len(passed),
        cannot_fail=sorted(passed & hollow_passed),
        criteria=crit,
        status_codes=code_proofs,
        criteria_proven=(
            round(sum(1 for p in crit if p.proving) / len(crit), 3) if crit else 1.0
        ),
    )


def problems(adequacy: Adequacy | None) -> list[str]:
    """The self-check's items: each criterion and status code whose tests cannot fail,
    with those tests and what to assert instead."""
    if adequacy is None:
        return []
    if not adequacy.measured:
        if not adequacy.tests_fault:
            return []
        return [
            f"{adequacy.reason}; a test on hollow code must fail like any test (an assertion "
            "that does not hold), not stop the run: do not exit, hang or break collection "
            "when the code gives nothing back"
        ]
    out = []
    for p in adequacy.criteria:
        if p.proving or not (p.hollow or p.unmatched):
            continue  # proven, or exercised by no test (the static check names it)
        wanted = ", ".join(sorted(values(p.criterion))) or "what it states"
        out.append(
            f"acceptance criterion {p.criterion!r} is not proven: {_why(p)}; call the code/ "
            "function inside the test itself (not only in a fixture or beforeEach) and "
            f"assert the result it must give ({wanted}), with no try/except around the "
            "assertion"
        )
    for p in adequacy.status_codes:
        if p.proving or not (p.hollow or p.unmatched):
            continue
        out.append(
            f"status {p.criterion} is not proven: {_why(p)}; send the request that gets "
            f"{p.criterion} and assert the status and what the body must hold"
        )
    return out


def _why(p: CriterionProof) -> str:
    """What is wrong with the tests that exercise a criterion."""
    if p.hollow:
        return (
            f"its tests ({', '.join(p.hollow[:4])}) also pass on {HOLLOW}, so they pass "
            "whatever the code does"
        )
    return (
        f"the run reported none of its tests ({', '.join(p.unmatched[:4])}) by that name: "
        "give each a plain string title (no computed names)"
    )
