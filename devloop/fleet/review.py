"""The review gate: a unit whose tests went green waits in `review` until a person approves
it (it passes and releases its dependents) or asks for changes (a coder retry with the note).

The store keeps the files as last approved (what the next diff is against) and that
approval's version, digest, attempt, by and ts (store/reviews.py);
agent-state/review-{unit}.json holds every review: attempt, verdict, note, by, ts.
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass, field

from devloop.core.artifacts import bidi_controls, binary_summary, codepoint, is_text, marked
from devloop.core.errors import DevLoopError
from devloop.core.loop import approve, request_changes
from devloop.fleet.control import current_epoch
from devloop.fleet.dispatch import move
from devloop.fleet.messages import Dispatch, StepMsg
from devloop.fleet.retest import passed_again
from devloop.fleet.transition import followup
from devloop.roles.context import reviews_path
from devloop.store import RedisStore, UnitState
from devloop.store.filesets import files_digest

DIFF_LINES = 4000  # lines of one file's diff shown; the rest is summarized
NOTE_CHARS = 4000


class ReviewRefused(DevLoopError, ValueError):
    """The unit is not waiting for a review (the message says what it is)."""


def reviewed(files: dict[str, bytes]) -> dict[str, bytes]:
    """The files a review looks at: the code, the tests and the contract."""
    return {p: d for p, d in files.items()
            if p.startswith(("code/", "tests/")) or p == "contract.json"}


def _waiting(store: RedisStore, pid: str, unit: str) -> UnitState:
    state = store.get_state(pid, unit)
    if state.status != "review":
        raise ReviewRefused(f'unit "{unit}" is {state.status}, not waiting for a review')
    return state


def approve_unit(store: RedisStore, pid: str, unit: str, by: str) -> list[Dispatch]:
    """The unit passes: its files become the approved version, its dependents are released
    (once: the release claims each dependent with SET NX); the chains to send."""
    state = _waiting(store, pid, unit)
    new = approve(state).model_copy(update={"updated_at": time.time()})
    epoch = current_epoch(store, pid)
    released = move(store, pid, unit, state, new, "loop_pass", f"review-{state.attempt}",
                    f"tests green and approved in review by {by}",
                    followup("pass", new, epoch, marks=bool(new.scripted)))
    if released is None:
        raise ReviewRefused(f'unit "{unit}" changed while it was being approved; look again')
    snapshot = store.unit_files(pid, unit)
    files = reviewed(snapshot.files)
    store.save_approval(pid, unit, files, {
        "version": snapshot.version, "digest": files_digest(files), "attempt": state.attempt,
        "by": by, "ts": time.time(),
    })
    _record(store, pid, unit, state.attempt, "approved", "", by)
    return released + passed_again(store, pid, unit, epoch)


def request_changes_unit(
    store: RedisStore, pid: str, unit: str, note: str, by: str
) -> list[Dispatch]:
    """A coder retry whose history carries the person's note as a tester's hint would be."""
    note = note.strip()[:NOTE_CHARS]
    if not note:
        raise ReviewRefused("say what should change (the note goes to the coder)")
    state = _waiting(store, pid, unit)
    new = request_changes(state, note).model_copy(update={"updated_at": time.time()})
    summary = f"changes requested in review by {by}; coder retries as attempt {new.attempt}"
    if move(store, pid, unit, state, new, "loop_retry_coder", f"review-{state.attempt}",
            summary, followup("retry_coder", new)) is None:
        raise ReviewRefused(f'unit "{unit}" changed while it was being reviewed; look again')
    _record(store, pid, unit, state.attempt, "changes", note, by)
    msg = StepMsg(pid=pid, unit_id=unit, attempt=new.attempt, mode="retry",
                  epoch=current_epoch(store, pid))
    return [Dispatch(msg=msg)]


def _record(store: RedisStore, pid: str, unit: str, attempt: int, verdict: str, note: str,
            by: str) -> None:
    """Append the review to agent-state/review-{unit}.json (the coder's retry reads it)."""
    path = reviews_path(unit)
    raw = store.agent_state_file(pid, path)
    try:
        reviews = json.loads(raw)["reviews"] if raw else []
    except (ValueError, KeyError, TypeError):
        reviews = []
    reviews.append({"attempt": attempt, "verdict": verdict, "note": note, "by": by,
                    "ts": time.time()})
    store.put_agent_state(pid, path, json.dumps({"reviews": reviews}, indent=2).encode())


@dataclass(frozen=True)
class FileDiff:
    """One reviewed file against its approved version.

    A side that is not text is one line, `binary file, N bytes, sha256 ...`, never its
    bytes; bidi controls and other invisible characters read `<U+202E>` (artifacts.marked),
    and `notes` says so: a reviewer sees what a file holds, not what it shows.
    """

    path: str
    change: str  # added | removed | changed
    lines: list[str]  # unified diff lines (without the file headers)
    notes: list[str] = field(default_factory=list)  # binary, bidi: what the lines mark


@dataclass(frozen=True)
class ReviewDiff:
    """The unit's code and tests against the last approved version (none: all is new)."""

    approved_attempt: int | None
    files: list[FileDiff]


def review_diff(store: RedisStore, pid: str, unit: str) -> ReviewDiff:
    """What changed since the last approval, file by file, in unified diff form."""
    old, attempt = store.approval(pid, unit)
    new = reviewed(store.unit_files(pid, unit).files)
    diffs = []
    for path in sorted(set(old) | set(new)):
        if old.get(path) == new.get(path):
            continue
        change = "added" if path not in old else "removed" if path not in new else "changed"
        before, after = _lines(old.get(path, b"")), _lines(new.get(path, b""))
        lines = list(difflib.unified_diff(before, after, lineterm="", n=3))[2:]
        if len(lines) > DIFF_LINES:
            lines = lines[:DIFF_LINES] + [f"... {len(lines) - DIFF_LINES} more lines"]
        notes = _notes(old.get(path), "approved") + _notes(new.get(path), "new")
        diffs.append(FileDiff(path, change, lines, notes))
    return ReviewDiff(attempt, diffs)


def _lines(data: bytes) -> list[str]:
    """A file as a review shows it: marked lines of text, or one line naming a binary."""
    if not is_text(data):
        return [binary_summary(data)]
    return [marked(line) for line in data.decode("utf-8").splitlines()]


def _notes(data: bytes | None, side: str) -> list[str]:
    """What the diff of one side marks: that it is binary, or where its bidi controls are."""
    if data is None:
        return []
    if not is_text(data):
        return [f"the {side} version is a binary file ({len(data)} bytes): shown by size "
                "and sha256, never as text"]
    found = bidi_controls(data.decode("utf-8"))
    if not found:
        return []
    lines = sorted({n for n, _ in found})
    chars = sorted({codepoint(c) for _, c in found})
    shown = ", ".join(str(n) for n in lines[:10]) + (" ..." if len(lines) > 10 else "")
    return [f"the {side} version holds bidi controls ({', '.join(chars)}: Trojan Source) on "
            f"line {shown}: shown as <U+...> where they are"]
