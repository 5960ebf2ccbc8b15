"""BugLedger: the bug state machine, dedup by unit:test, reopen, filters, foreign lines."""

from __future__ import annotations

import itertools
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from devloop.core.models import Bug, BugOpen, BugStatus, BugTransition
from devloop.ledgers.bugs import BugLedger, BugNotOwned, BugTransitionError
from devloop.ledgers.sink import FileSink

STATUSES: tuple[BugStatus, ...] = ("open", "fixing", "fixed")
# The whole table, written out independently of the code under test.
LEGAL = {
    ("open", "fixing"),
    ("open", "fixed"),
    ("fixing", "fixed"),
    ("fixing", "open"),
    ("fixed", "open"),
}
ID = re.compile(r"^bug-\d{8}-\d{4}-[0-9a-f]{16}$")
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def fixed_clock() -> datetime:
    return datetime(2026, 5, 13, 10, 31, 7, tzinfo=UTC)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "bugs.ndjson"


@pytest.fixture
def ledger(path: Path) -> BugLedger:
    return BugLedger(FileSink(path))


def bug_in(ledger: BugLedger, status: BugStatus, test: str = "t1", unit: str = "todo-be") -> Bug:
    """A bug brought to `status` by legal moves."""
    bug, _ = ledger.open(unit, "run-1", test)
    if status == "fixing":
        bug = ledger.transition(bug.id, "fixing", by="loop")
    elif status == "fixed":
        bug = ledger.transition(bug.id, "fixed", by="tester", fix_refs=["run-2"])
    assert bug.status == status
    return bug


def test_open_writes_one_compact_bug_open_line(path: Path) -> None:
    ledger = BugLedger(FileSink(path), now=fixed_clock)
    bug, opened = ledger.open(
        "todo-be",
        "run-20260513-1031",
        "缺 body title → 400",
        severity="high",
        title="缺 body title 时 500 而非 400",
        detail="TypeError: ...",
    )
    assert opened
    assert ID.match(bug.id) and bug.id.startswith("bug-20260513-1031-")
    text = path.read_text(encoding="utf-8")
    assert text == (
        f'{{"event":"bug_open","id":"{bug.id}","ts":"2026-05-13T10:31:07Z","status":"open",'
        '"source":"unit_test","unit_id":"todo-be","run_id":"run-20260513-1031",'
        '"test_name":"缺 body title → 400","category":"unknown","severity":"high",'
        '"title":"缺 body title 时 500 而非 400","detail":"TypeError: ...",'
        '"affected_units":["todo-be"]}\n'
    )
    assert bug == Bug(
        id=bug.id,
        status="open",
        unit_id="todo-be",
        test_name="缺 body title → 400",
        source="unit_test",
        severity="high",
        title="缺 body title 时 500 而非 400",
        run_id="run-20260513-1031",
        detail="TypeError: ...",
        affected_units=["todo-be"],
        opened_at="2026-05-13T10:31:07Z",
    )
    assert ledger.get(bug.id) == bug


def test_open_defaults_the_title_and_affected_units(ledger: BugLedger) -> None:
    bug, _ = ledger.open("todo-be", "run-1", "creates a todo")
    assert bug.title == "creates a todo failed"
    (event,) = ledger.events()
    assert isinstance(event, BugOpen) and event.affected_units == ["todo-be"]
    assert TS.match(event.ts)


@pytest.mark.parametrize(("start", "to"), sorted(itertools.product(STATUSES, STATUSES)))
def test_every_pair_of_states_is_allowed_or_refused(
    ledger: BugLedger, path: Path, start: BugStatus, to: BugStatus
) -> None:
    bug = bug_in(ledger, start)
    before = path.read_text()
    if (start, to) in LEGAL:
        moved = ledger.transition(bug.id, to, by="tester", fix_refs=("run-9",))
        assert moved.status == to
        assert ledger.get(bug.id) == moved
        last = json.loads(path.read_text().splitlines()[-1])
        assert last == {
            "event": "bug_transition",
            "id": bug.id,
            "ts": last["ts"],
            "to": to,
            "by": "tester",
            "fix_refs": ["run-9"],
        }
        assert TS.match(last["ts"])
    else:
        with pytest.raises(BugTransitionError) as caught:
            ledger.transition(bug.id, to, by="tester")
        err = caught.value
        assert (err.bug_id, err.from_, err.to) == (bug.id, start, to)
        assert bug.id in str(err) and repr(start) in str(err) and repr(to) in str(err)
        assert path.read_text() == before, "a refused transition must append nothing"


def test_transition_of_an_unknown_bug_is_refused(ledger: BugLedger, path: Path) -> None:
    bug_in(ledger, "open")
    with pytest.raises(BugTransitionError, match="bug bug-20990101-0000-beef: unknown bug id"):
        ledger.transition("bug-20990101-0000-beef", "fixed", by="tester")
    assert len(path.read_text().splitlines()) == 1


def test_transition_of_another_units_bug_is_refused_for_an_owner(
    ledger: BugLedger, path: Path
) -> None:
    bug, _ = ledger.open("todo-be", "run-1-1", "t")
    before = path.read_text()
    with pytest.raises(BugNotOwned, match=f"bug {bug.id}: not a bug of unit todo-fe"):
        ledger.transition(bug.id, "fixed", by="tester", owner="todo-fe")
    assert path.read_text() == before
    assert ledger.transition(bug.id, "fixed", by="tester", owner="todo-be").status == "fixed"


def test_transition_to_a_status_that_does_not_exist_is_refused(ledger: BugLedger) -> None:
    bug = bug_in(ledger, "open")
    with pytest.raises(BugTransitionError, match="cannot move from 'open' to 'closed'"):
        ledger.transition(bug.id, "closed", by="tester")  # type: ignore[arg-type]


def test_a_green_run_fixes_an_open_bug_and_keeps_the_history(ledger: BugLedger) -> None:
    bug = bug_in(ledger, "fixing")
    fixed = ledger.transition(bug.id, "fixed", by="tester", fix_refs=["run-20260513-1034"])
    assert [(t.to, t.by, t.fix_refs) for t in fixed.history] == [
        ("fixing", "loop", []),
        ("fixed", "tester", ["run-20260513-1034"]),
    ]


def test_the_same_failing_test_does_not_open_a_second_bug(ledger: BugLedger, path: Path) -> None:
    first, opened = ledger.open("todo-be", "run-1", "t1")
    again, opened_again = ledger.open("todo-be", "run-2", "t1", title="another title")
    assert opened and not opened_again
    assert again == first
    assert len(path.read_text().splitlines()) == 1


def test_a_bug_being_fixed_whose_test_fails_again_is_reopened(ledger: BugLedger) -> None:
    bug = bug_in(ledger, "fixing")
    again, changed = ledger.open("todo-be", "run-3", "t1")
    assert (again.id, again.status, changed) == (bug.id, "open", True)
    assert [(t.to, t.by) for t in again.history] == [("fixing", "loop"), ("open", "tester")]
    assert again.history[-1].model_extra == {"run_id": "run-3"}
    # Open again: the next red run of the same test reuses it as it is.
    assert ledger.open("todo-be", "run-4", "t1") == (again, False)


def test_the_loops_move_to_fixing_names_the_attempt(ledger: BugLedger, path: Path) -> None:
    bug, _ = ledger.open("todo-be", "run-1-1", "t1")
    moved = ledger.transition(bug.id, "fixing", by="loop", attempt=2)
    assert moved.history[-1].model_extra == {"attempt": 2}
    assert json.loads(path.read_text().splitlines()[-1])["attempt"] == 2


def test_dedup_key_is_unit_and_test(ledger: BugLedger) -> None:
    a, _ = ledger.open("todo-be", "run-1", "t1")
    b, b_new = ledger.open("todo-be", "run-1", "t2")
    c, c_new = ledger.open("todo-fe", "run-1", "t1")
    assert b_new and c_new
    assert len({a.id, b.id, c.id}) == 3
    assert [x.dedup_key for x in ledger.list()] == ["todo-be:t1", "todo-be:t2", "todo-fe:t1"]


def test_a_fixed_bug_that_fails_again_is_reopened_not_duplicated(
    ledger: BugLedger, path: Path
) -> None:
    bug = bug_in(ledger, "fixed")
    reopened, changed = ledger.open("todo-be", "run-7", "t1", by="tester")
    assert changed
    assert (reopened.id, reopened.status) == (bug.id, "open")
    assert [t.to for t in reopened.history] == ["fixed", "open"]
    assert reopened.history[-1].model_extra == {"run_id": "run-7"}
    assert ledger.get(bug.id) == reopened
    opens = [e for e in ledger.events() if isinstance(e, BugOpen)]
    assert len(opens) == 1
    # Now live again: the next failure of the same test reuses it.
    assert ledger.open("todo-be", "run-8", "t1") == (reopened, False)


def test_list_filters_by_unit_and_status(ledger: BugLedger) -> None:
    a = bug_in(ledger, "open", test="a")
    b = bug_in(ledger, "fixing", test="b")
    c = bug_in(ledger, "fixed", test="c")
    d = bug_in(ledger, "open", test="a", unit="todo-fe")
    ids = lambda bugs: [x.id for x in bugs]  # noqa: E731
    assert ids(ledger.list()) == [a.id, b.id, c.id, d.id]
    assert ids(ledger.list(unit_id="todo-be")) == [a.id, b.id, c.id]
    assert ids(ledger.list(status="open")) == [a.id, d.id]
    assert ids(ledger.list(status=["open", "fixing"])) == [a.id, b.id, d.id]
    assert ids(ledger.list(unit_id="todo-be", status=("fixed",))) == [c.id]
    assert ledger.list(unit_id="nobody") == []


def test_get_unknown_bug_is_none(ledger: BugLedger) -> None:
    assert ledger.get("bug-20990101-0000-0000") is None


def test_lines_written_by_other_tools_keep_their_unknown_fields(
    ledger: BugLedger, path: Path
) -> None:
    foreign = [
        {
            "event": "bug_open",
            "id": "bug-20260513-1031-c9f2",
            "ts": "2026-05-13T10:31:00Z",
            "status": "open",
            "source": "unit_test",
            "unit_id": "todo-be",
            "run_id": "run-20260513-1031",
            "test_name": "t1",
            "title": "x",
            "triage": {"owner": "bug-triager", "root_cause": "auth"},
        },
        {"event": "bug_comment", "id": "bug-20260513-1031-c9f2", "text": "not ours"},
        {
            "event": "bug_transition",
            "id": "bug-20260513-1031-c9f2",
            "ts": "2026-05-13T10:33:00Z",
            "to": "fixing",
            "by": "loop",
            "note": "coder retry 2",
        },
    ]
    text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in foreign) + "garbage\n"
    path.write_text(text, encoding="utf-8")

    opened, transition = ledger.events()
    assert opened.model_extra == {"triage": {"owner": "bug-triager", "root_cause": "auth"}}
    assert isinstance(transition, BugTransition) and transition.model_extra == {
        "note": "coder retry 2"
    }
    bug = ledger.transition("bug-20260513-1031-c9f2", "fixed", by="tester")
    assert bug.history[0].model_extra == {"note": "coder retry 2"}
    assert path.read_text(encoding="utf-8").startswith(text), "append-only: old lines untouched"
    assert ledger.open("todo-be", "run-2", "t1")[1]  # fixed -> reopened
    assert [b.status for b in ledger.list()] == ["open"]


def test_a_second_ledger_on_the_same_file_sees_the_same_bugs(path: Path) -> None:
    writer, reader = BugLedger(FileSink(path)), BugLedger(FileSink(path))
    bug, _ = writer.open("todo-be", "run-1", "t1")
    writer.transition(bug.id, "fixing", by="loop")
    assert reader.list(status="fixing")[0].id == bug.id
