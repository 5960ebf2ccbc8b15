"""The review gate's actions: approval passes a unit and releases its dependents once; asking
for changes is a coder retry whose history carries the note; the diff is against the last
approved version."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest

from devloop.console.pages import unit_view
from devloop.console.render import render
from devloop.fleet.dispatch import enqueue_project, needs_review
from devloop.fleet.messages import Dispatch
from devloop.fleet.review import (
    ReviewRefused,
    approve_unit,
    request_changes_unit,
    review_diff,
)
from devloop.roles import context
from devloop.store import RedisStore, UnitState
from tests.fleet.builder import UnitPlan, build

PID = "p-fleet"


def _project(store: RedisStore, tmp_path: Path) -> None:
    plans = [UnitPlan("gate", review="required"), UnitPlan("after", ["gate"]),
             UnitPlan("free", review="none")]
    enqueue_project(store, build(tmp_path / "p", plans, review="required"))
    store.put_state(PID, "gate", UnitState(status="review", attempt=2))
    _commit(store, 2, {"code/unit.py": b"def value():\n    return 42\n",
                       "tests/test_unit.py": b"# t\n"})


def _commit(store: RedisStore, attempt: int, changes: dict[str, bytes | None]) -> None:
    version = store.unit_files(PID, "gate").version
    done = store.commit_files(PID, "gate", role="coder", attempt=attempt, base_version=version,
                              changes=changes)
    assert done.applied


def test_units_json_says_which_units_wait_for_review(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    _project(redis_store, tmp_path)
    assert needs_review(redis_store, PID, "gate") and needs_review(redis_store, PID, "after")
    assert not needs_review(redis_store, PID, "free")  # its own "none" wins


def test_two_approvals_at_once_pass_the_unit_and_release_its_dependent_once(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    _project(redis_store, tmp_path)
    released: list[Dispatch] = []
    refused: list[str] = []
    barrier = threading.Barrier(2)

    def approve() -> None:
        barrier.wait()
        try:
            released.extend(approve_unit(redis_store, PID, "gate", "test"))
        except ReviewRefused as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=approve) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [d.msg.unit_id for d in released] == ["after"] and len(refused) == 1
    assert redis_store.get_state(PID, "gate").status == "passed"
    assert redis_store.get_state(PID, "after").status == "coding"
    assert review_diff(redis_store, PID, "gate").files == []  # all of it is approved now


def test_the_diff_is_against_the_last_approved_version(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    _project(redis_store, tmp_path)
    first = review_diff(redis_store, PID, "gate")
    assert first.approved_attempt is None
    assert [(f.path, f.change) for f in first.files] == [
        ("code/unit.py", "added"), ("tests/test_unit.py", "added")]
    approve_unit(redis_store, PID, "gate", "test")
    redis_store.put_state(PID, "gate", UnitState(status="review", attempt=3))
    _commit(redis_store, 3, {"code/unit.py": b"def value():\n    return 43\n"})
    second = review_diff(redis_store, PID, "gate")
    assert second.approved_attempt == 2
    assert [(f.path, f.change) for f in second.files] == [("code/unit.py", "changed")]
    assert "-    return 42" in second.files[0].lines and "+    return 43" in second.files[0].lines


def test_the_diff_shows_a_binary_by_size_and_digest_and_marks_bidi_controls(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    # Issue 26, item 9: a .pyc showed as mojibake with no "binary" mark, and Trojan Source
    # bidi controls showed unmarked. (A commit now refuses both; these were stored
    # directly, as a store from before the rule may hold them.)
    _project(redis_store, tmp_path)
    approve_unit(redis_store, PID, "gate", "test")
    redis_store.put_state(PID, "gate", UnitState(status="review", attempt=3))
    pyc = b"\xa7\r\r\n\x01\0\0\0" + bytes(8) + b"\xe3\0\0\0"
    trojan = ('def allowed(role):\n'
              '    return role != "admin\u202e \u2066# not admin\u2069 \u2066"\n').encode()
    _commit(redis_store, 3, {"code/__pycache__/unit.cpython-311.pyc": pyc,
                             "code/auth.py": trojan})
    diff = {f.path: f for f in review_diff(redis_store, PID, "gate").files}
    binary = diff["code/__pycache__/unit.cpython-311.pyc"]
    assert binary.lines == ["@@ -0,0 +1 @@",
                            f"+binary file, 20 bytes, sha256 {hashlib.sha256(pyc).hexdigest()}"]
    assert binary.notes == ["the new version is a binary file (20 bytes): shown by size and "
                            "sha256, never as text"]
    auth = diff["code/auth.py"]
    assert auth.lines[-1] == (
        '+    return role != "admin<U+202E> <U+2066># not admin<U+2069> <U+2066>"')
    assert auth.notes == ["the new version holds bidi controls (U+202E, U+2066, U+2069: "
                          "Trojan Source) on line 2: shown as <U+...> where they are"]
    page = render("unit.html.j2", v=unit_view(redis_store, PID, "gate"), since="", nonce="n",
                  done=None, link=lambda path: path)
    assert "<mark data-mark>&lt;U+202E&gt;</mark>" in page and "\u202e" not in page
    assert "binary file, 20 bytes, sha256" in page and "\ufffd" not in page
    assert "the new version is a binary file (20 bytes)" in page


def test_asking_for_changes_retries_the_coder_with_the_note_in_its_history(
    redis_store: RedisStore, tmp_path: Path
) -> None:
    _project(redis_store, tmp_path)
    chains = request_changes_unit(redis_store, PID, "gate", "return a named constant", "test")
    assert [(d.msg.unit_id, d.msg.attempt, d.msg.mode) for d in chains] == [("gate", 3, "retry")]
    state = redis_store.get_state(PID, "gate")
    assert (state.status, state.last_hint) == ("coding", "return a named constant")
    notes = context.review_notes(redis_store, PID, "gate")
    files = redis_store.unit_files(PID, "gate").files
    history, _ = context.retry_history(files, 3, notes)
    said = history[1].tester_said  # attempt 2: its run was green, the person said this
    assert said[-1]["hint"] == "return a named constant"
    assert redis_store.get_state(PID, "after").status == "pending"  # never released


def test_a_unit_not_in_review_cannot_be_approved(redis_store: RedisStore, tmp_path: Path) -> None:
    _project(redis_store, tmp_path)
    with pytest.raises(ReviewRefused, match="not waiting for a review"):
        approve_unit(redis_store, PID, "after", "test")
    with pytest.raises(ReviewRefused, match="say what should change"):
        request_changes_unit(redis_store, PID, "gate", "  ", "test")
